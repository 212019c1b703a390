//go:build !unix

package source

// openFlags are added when opening files from a source.
const openFlags = 0
