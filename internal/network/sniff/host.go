package sniff

import (
	"net/netip"
	"strings"
)

const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// normaliseName checks a DNS host name as it appears in SNI or a Host
// header and returns it lowercased without its trailing dot. Allowed are
// labels of 1 to 63 bytes from [A-Za-z0-9_-] joined by single dots, at most
// 253 bytes in all. Names ending in a number are returned as they are; the
// callers decide whether an IPv4 address is welcome.
func normaliseName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	switch {
	case s == "":
		return "", malformed("empty host name")
	case len(s) > maxNameLen:
		return "", malformed("host name of %d bytes exceeds %d", len(s), maxNameLen)
	}
	label := 0
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return "", malformed("host name %s has an empty label", quote(s))
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return "", malformed("host name %s contains byte %#02x", quote(s), c)
		}
		if label++; label > maxLabelLen {
			return "", malformed("host name %s has a label longer than %d bytes", quote(s), maxLabelLen)
		}
	}
	if label == 0 {
		return "", malformed("host name %s has an empty label", quote(s))
	}
	return strings.ToLower(s), nil
}

// endsInNumber reports whether the last label of a normalised name is a
// number, decimal or 0x-hex, as the WHATWG URL standard defines it: such a
// name is an IPv4 address to inet_aton ("127.1", "0x7f.1") and never a
// host name, since no top-level domain is numeric.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// ParseHostHeader splits a Host header value ("example.com",
// "example.com:8080", "[2001:db8::1]:443", "EXAMPLE.com.") into a host,
// normalised like Result.Name, and a port (0 when absent).
//
// It rejects empty hosts, empty, zero or out-of-range ports, userinfo
// ("a@b"), spaces and control bytes, more than one colon outside brackets,
// host names breaking the rules of ParseClientHello's server name, IPv6
// literals with a zone or without brackets, and names ending in a number
// that are not a dotted-quad IPv4 address. IP addresses are returned in
// their canonical form. All errors wrap ErrMalformed.
func ParseHostHeader(v string) (host string, port uint16, err error) {
	if v == "" {
		return "", 0, malformed("empty host")
	}
	for i := range len(v) {
		switch c := v[i]; {
		case c <= ' ' || c == 0x7f:
			return "", 0, malformed("host %s contains a space or control byte", quote(v))
		case c == '@':
			return "", 0, malformed("host %s contains userinfo", quote(v))
		}
	}
	hostPart, portPart, hasPort := v, "", false
	if v[0] == '[' {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return "", 0, malformed("host %s has no closing bracket", quote(v))
		}
		hostPart = v[1:end]
		if rest := v[end+1:]; rest != "" {
			if portPart, hasPort = strings.CutPrefix(rest, ":"); !hasPort {
				return "", 0, malformed("host %s has bytes after the closing bracket", quote(v))
			}
		}
		addr, perr := netip.ParseAddr(hostPart)
		if perr != nil || !addr.Is6() || addr.Zone() != "" {
			return "", 0, malformed("host %s is not a bracketed IPv6 address", quote(v))
		}
		host = addr.String()
	} else {
		switch strings.Count(v, ":") {
		case 0:
		case 1:
			hostPart, portPart, hasPort = strings.Cut(v, ":")
		default:
			return "", 0, malformed("host %s has more than one colon outside brackets", quote(v))
		}
		if host, err = normaliseName(hostPart); err != nil {
			return "", 0, err
		}
		if endsInNumber(host) {
			addr, perr := netip.ParseAddr(host)
			if perr != nil || !addr.Is4() {
				return "", 0, malformed("host %s ends in a number but is not an IPv4 address", quote(v))
			}
			host = addr.String()
		}
	}
	if hasPort {
		if port, err = parsePort(portPart); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}

// parsePort parses 1 to 5 decimal digits with a value from 1 to 65535.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 {
		return 0, malformed("bad port %s", quote(s))
	}
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, malformed("bad port %s", quote(s))
		}
		n = n*10 + int(s[i]-'0')
	}
	if n == 0 || n > 65535 {
		return 0, malformed("port %d out of range", n)
	}
	return uint16(n), nil
}
