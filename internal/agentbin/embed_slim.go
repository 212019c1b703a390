//go:build slimagent

package agentbin

import _ "embed"

// bin/corral-agent is written by scripts/build.sh just before it builds
// corral with -tags slimagent.
//
//go:embed bin/corral-agent
var slim []byte

func init() { embedded = slim }
