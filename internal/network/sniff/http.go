package sniff

import (
	"bytes"
	"fmt"
	"strings"
)

// stepHTTP scans the lines of buf not yet scanned and parses the request
// head once its blank line has arrived. Lines end in LF, with or without a
// CR before it.
func (s *sniffer) stepHTTP(buf []byte) (bool, error) {
	for {
		i := bytes.IndexByte(buf[s.scanned:], '\n')
		if i < 0 {
			s.scanned = len(buf)
			return false, nil
		}
		line := buf[s.lineStart : s.scanned+i]
		next := s.scanned + i + 1
		s.scanned = next
		if s.lineStart > 0 && (len(line) == 0 || len(line) == 1 && line[0] == '\r') {
			res, err := parseHTTPHead(buf[:next])
			if err == nil {
				s.res = res
			}
			return err == nil, err
		}
		s.lineStart = next
	}
}

// parseHTTPHead parses a complete HTTP/1.x request head, blank line
// included: "METHOD SP target SP HTTP/1.x" and header fields. It is strict
// where lenient parsers disagree (RFC 9112, sections 2.2, 3 and 5): bare CR,
// obsolete line folding, whitespace before a field name's colon, more than
// one Host, and a Host that differs from an absolute-form or CONNECT target
// are errors.
func parseHTTPHead(head []byte) (Result, error) {
	res := Result{Kind: HTTP}
	lines := strings.Split(string(head), "\n")
	lines = lines[:len(lines)-2] // the blank line and the empty rest after it
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if strings.IndexByte(l, '\r') >= 0 {
			return res, malformed("http request: bare CR")
		}
		lines[i] = l
	}

	method, rest, _ := strings.Cut(lines[0], " ")
	target, version, ok := strings.Cut(rest, " ")
	switch {
	case !ok || strings.IndexByte(version, ' ') >= 0:
		return res, malformed("http request line %s is not METHOD SP target SP version", quote(lines[0]))
	case method == "" || len(method) > maxMethodLen || !isMethod(method):
		return res, malformed("http request: bad method %s", quote(method))
	case target == "" || !isVisible(target):
		return res, malformed("http request: bad target %s", quote(target))
	case len(version) != len("HTTP/1.x") || !strings.HasPrefix(version, "HTTP/1.") || version[7] < '0' || version[7] > '9':
		return res, malformed("http request: unsupported version %s", quote(version))
	}
	res.Method, res.Target = method, target

	var hostValue string
	hasHost := false
	for _, l := range lines[1:] {
		if l[0] == ' ' || l[0] == '\t' { // l is not empty: the first empty line ends the head
			return res, malformed("http request: obsolete line folding")
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || !isToken(name) {
			return res, malformed("http request: bad header field name in %s", quote(l))
		}
		value = strings.Trim(value, " \t")
		if !isFieldValue(value) {
			return res, malformed("http request: header field %s has a control byte", quote(name))
		}
		if strings.EqualFold(name, "Host") {
			if hasHost {
				return res, malformed("http request: duplicate Host header")
			}
			hasHost, hostValue = true, value
		}
	}

	fromTarget := true
	var err error
	switch {
	case method == "CONNECT":
		if res.Name, res.Port, err = ParseHostHeader(target); err != nil {
			return res, fmt.Errorf("http request: CONNECT target: %w", err)
		}
		if res.Port == 0 {
			return res, malformed("http request: CONNECT target %s has no port", quote(target))
		}
	case target[0] == '/':
		fromTarget = false
	case target == "*" && method == "OPTIONS":
		fromTarget = false
	default:
		authority, ok := absoluteAuthority(target)
		if !ok {
			return res, malformed("http request: target %s is not in origin, absolute, authority or asterisk form", quote(target))
		}
		if res.Name, res.Port, err = ParseHostHeader(authority); err != nil {
			return res, fmt.Errorf("http request: target authority: %w", err)
		}
	}
	if !hasHost {
		return res, nil
	}
	host, port, err := ParseHostHeader(hostValue)
	if err != nil {
		return res, fmt.Errorf("http request: Host header: %w", err)
	}
	if !fromTarget {
		res.Name, res.Port = host, port
		return res, nil
	}
	if host != res.Name || port != 0 && res.Port != 0 && port != res.Port {
		return res, malformed("http request: Host header differs from the request target")
	}
	return res, nil
}

// absoluteAuthority returns the authority of an absolute-form target,
// scheme "://" authority [path-abempty] [ "?" query ].
func absoluteAuthority(target string) (string, bool) {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || scheme == "" {
		return "", false
	}
	for i := range len(scheme) {
		c := scheme[i]
		alpha := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !alpha && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	return rest, true
}

func isMethod(s string) bool {
	for i := range len(s) {
		if !isMethodByte(s[i], i) {
			return false
		}
	}
	return true
}

// isVisible reports whether s has only visible ASCII (VCHAR).
func isVisible(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// isToken reports whether s has only tchar bytes (RFC 9110, section 5.6.2).
func isToken(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// isFieldValue reports whether s has no control bytes other than HTAB;
// obs-text (0x80-0xff) is allowed.
func isFieldValue(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
