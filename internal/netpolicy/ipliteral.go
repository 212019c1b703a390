package netpolicy

import (
	"net/netip"
	"strings"
)

// ParseIPLiteral recognises every spelling of an IPv4 address that
// inet_aton(3) and browsers accept: dotted decimal, one 32-bit number
// ("2852039166"), hex ("0xA9FEA9FE"), octal parts ("0251.0376.0251.0376"),
// short forms whose last part fills the remaining bytes ("169.254.43518",
// "169.16689662"), mixed hex, octal and decimal parts, and one trailing dot
// as browsers allow. It also recognises IPv6 literals with or without
// brackets; a zone is stripped. It returns the address (IPv4 as a 4-byte
// Addr, an IPv4-mapped IPv6 address unmapped) and true, or false when host
// is not an IP literal (a domain name, or a part out of range).
func ParseIPLiteral(host string) (netip.Addr, bool) {
	if inner, ok := strings.CutPrefix(host, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok {
			return netip.Addr{}, false
		}
		return parseIPv6Literal(inner)
	}
	if strings.Contains(host, ":") {
		return parseIPv6Literal(host)
	}
	return parseIPv4Literal(host)
}

func parseIPv6Literal(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// parseIPv4Literal follows inet_aton(3) and the WHATWG URL IPv4 parser: one
// to four parts, each decimal, octal (leading 0) or hex (leading 0x, which
// alone means 0); every part but the last is one byte and the last fills
// the bytes left.
func parseIPv4Literal(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return netip.Addr{}, false
	}
	var parts [4]uint64
	n := 0
	for p := range strings.SplitSeq(s, ".") {
		if n == len(parts) {
			return netip.Addr{}, false
		}
		v, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
	}
	for _, v := range parts[:n-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
	}
	last := parts[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, false
	}
	v := uint32(last)
	for i, p := range parts[:n-1] {
		v |= uint32(p) << (24 - 8*i)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Part parses one part; it fails on an empty part, a digit out of
// its base, or a value above 32 bits.
func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}
