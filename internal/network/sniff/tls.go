package sniff

import "fmt"

const (
	recordTypeHandshake = 0x16
	recordHeaderLen     = 5
	handshakeHeaderLen  = 4
	typeClientHello     = 1
	extServerName       = 0
	extALPN             = 16
	nameTypeHostName    = 0
	maxSessionIDLen     = 32
	// maxRecordLen is the TLSCiphertext bound, 2^14 + 2048: looser than the
	// 2^14 a plaintext record may carry, since some stacks overshoot.
	maxRecordLen = 1<<14 + 2048
)

// stepTLS consumes the handshake records in buf from s.pos on and parses
// the ClientHello once all of it has arrived. Records after the one that
// completes the ClientHello are left alone.
func (s *sniffer) stepTLS(buf []byte) (bool, error) {
	for s.need == 0 || len(s.hs) < s.need {
		if s.recLeft == 0 {
			if len(buf)-s.pos < recordHeaderLen {
				return false, nil
			}
			h := buf[s.pos : s.pos+recordHeaderLen]
			n := int(h[3])<<8 | int(h[4])
			switch {
			case h[0] != recordTypeHandshake:
				return false, malformed("tls record of type %d inside the client hello", h[0])
			case h[1] != 3:
				return false, malformed("tls record version %#04x", uint16(h[1])<<8|uint16(h[2]))
			case n == 0:
				return false, malformed("empty tls handshake record")
			case n > maxRecordLen:
				return false, malformed("tls record of %d bytes exceeds %d", n, maxRecordLen)
			}
			s.recLeft = n
			s.pos += recordHeaderLen
		}
		if s.pos == len(buf) {
			return false, nil
		}
		n := min(s.recLeft, len(buf)-s.pos)
		if s.need > 0 {
			n = min(n, s.need-len(s.hs))
		}
		s.hs = append(s.hs, buf[s.pos:s.pos+n]...)
		s.pos += n
		s.recLeft -= n
		if s.need == 0 && len(s.hs) >= handshakeHeaderLen {
			if s.hs[0] != typeClientHello {
				return false, malformed("tls handshake message of type %d, want a client hello", s.hs[0])
			}
			n := int(s.hs[1])<<16 | int(s.hs[2])<<8 | int(s.hs[3])
			if handshakeHeaderLen+n > s.max {
				return false, fmt.Errorf("tls client hello of %d bytes: %w", n, ErrTooLarge)
			}
			s.need = handshakeHeaderLen + n
		}
	}
	sni, alpn, err := ParseClientHello(s.hs[handshakeHeaderLen:s.need])
	if err != nil {
		return false, err
	}
	s.res.Name, s.res.ALPN = sni, alpn
	return true, nil
}

// ParseClientHello parses the body of a ClientHello handshake message, that
// is the bytes after its 4-byte handshake header (type 1 and a 24-bit
// length), and returns its server name and ALPN protocols.
//
// The server name is the one host_name (type 0) entry of the server_name
// extension, normalised like Result.Name; "" when there is none. More than
// one host_name entry, a name with bytes outside [A-Za-z0-9._-], empty or
// over-long labels, and an IP literal (RFC 6066 forbids them; names whose
// last label is numeric count, since resolvers read "127.1" as an address)
// are errors. So are duplicate extensions, lengths that do not add up and
// bytes after the extensions. All errors wrap ErrMalformed.
func ParseClientHello(msg []byte) (sni string, alpn []string, err error) {
	s := byteString(msg)
	var sessionID, suites, compression, exts byteString
	switch {
	case !s.skip(2 + 32): // legacy_version, random
		return "", nil, malformed("tls client hello of %d bytes is too short", len(msg))
	case !s.vec8(&sessionID) || len(sessionID) > maxSessionIDLen:
		return "", nil, malformed("tls client hello: bad session id")
	case !s.vec16(&suites) || len(suites) == 0 || len(suites)%2 != 0:
		return "", nil, malformed("tls client hello: bad cipher suites")
	case !s.vec8(&compression) || len(compression) == 0:
		return "", nil, malformed("tls client hello: bad compression methods")
	case len(s) == 0: // extensions are optional
		return "", nil, nil
	case !s.vec16(&exts) || len(s) != 0:
		return "", nil, malformed("tls client hello: bad extensions length")
	}
	seen := make(map[uint16]bool)
	for len(exts) > 0 {
		var typ uint16
		var data byteString
		if !exts.u16(&typ) || !exts.vec16(&data) {
			return "", nil, malformed("tls client hello: truncated extension")
		}
		if seen[typ] {
			return "", nil, malformed("tls client hello: duplicate extension %d", typ)
		}
		seen[typ] = true
		switch typ {
		case extServerName:
			if sni, err = parseServerName(data); err != nil {
				return "", nil, err
			}
		case extALPN:
			if alpn, err = parseALPN(data); err != nil {
				return "", nil, err
			}
		}
	}
	return sni, alpn, nil
}

// parseServerName parses the server_name extension (RFC 6066, section 3).
// Entries of other name types are skipped, assuming they too carry a
// 16-bit length, as crypto/tls does.
func parseServerName(data byteString) (string, error) {
	var list byteString
	if !data.vec16(&list) || len(list) == 0 || len(data) != 0 {
		return "", malformed("tls server_name extension: bad list length")
	}
	var name string
	found := false
	for len(list) > 0 {
		var typ uint8
		var raw byteString
		if !list.u8(&typ) || !list.vec16(&raw) || len(raw) == 0 {
			return "", malformed("tls server_name extension: bad entry")
		}
		if typ != nameTypeHostName {
			continue
		}
		if found {
			return "", malformed("tls server_name extension: more than one host_name")
		}
		found = true
		n, err := normaliseName(string(raw))
		if err != nil {
			return "", fmt.Errorf("tls server name: %w", err)
		}
		if endsInNumber(n) {
			return "", malformed("tls server name %s is an IP address", quote(n))
		}
		name = n
	}
	return name, nil
}

// parseALPN parses the application_layer_protocol_negotiation extension
// (RFC 7301, section 3.1).
func parseALPN(data byteString) ([]string, error) {
	var list byteString
	if !data.vec16(&list) || len(list) == 0 || len(data) != 0 {
		return nil, malformed("tls alpn extension: bad list length")
	}
	var protos []string
	for len(list) > 0 {
		var p byteString
		if !list.vec8(&p) || len(p) == 0 {
			return nil, malformed("tls alpn extension: bad protocol name")
		}
		protos = append(protos, string(p))
	}
	return protos, nil
}

// byteString is a bounds-checked reader over a byte slice in the style of
// golang.org/x/crypto/cryptobyte: every method reports false, consuming
// nothing, when the bytes run out.
type byteString []byte

func (s *byteString) skip(n int) bool {
	if len(*s) < n {
		return false
	}
	*s = (*s)[n:]
	return true
}

func (s *byteString) u8(out *uint8) bool {
	if len(*s) < 1 {
		return false
	}
	*out = (*s)[0]
	*s = (*s)[1:]
	return true
}

func (s *byteString) u16(out *uint16) bool {
	if len(*s) < 2 {
		return false
	}
	*out = uint16((*s)[0])<<8 | uint16((*s)[1])
	*s = (*s)[2:]
	return true
}

// vec reads a vector whose length prefix is lenBytes long.
func (s *byteString) vec(lenBytes int, out *byteString) bool {
	if len(*s) < lenBytes {
		return false
	}
	n := 0
	for _, b := range (*s)[:lenBytes] {
		n = n<<8 | int(b)
	}
	if len(*s)-lenBytes < n {
		return false
	}
	*out = (*s)[lenBytes : lenBytes+n]
	*s = (*s)[lenBytes+n:]
	return true
}

func (s *byteString) vec8(out *byteString) bool  { return s.vec(1, out) }
func (s *byteString) vec16(out *byteString) bool { return s.vec(2, out) }
