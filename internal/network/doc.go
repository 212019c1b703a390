// Package network gives boxes governed egress: it wires a box's network
// namespace so that every TCP connection and DNS query of the box reaches
// the daemon (and nothing else leaves), decides each against the box's
// policy (internal/netpolicy) and the global address guard, forwards what
// is allowed from the host, substitutes secrets for their hosts only
// (internal/secrets), and records every attempt, allowed or denied, with
// the command in the box that made it.
//
// See docs/network.md for the design and netns_linux.go for the wiring.
package network
