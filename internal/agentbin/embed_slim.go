//go:build slimagent

package agentbin

import _ "embed"

// bin/corral-agent and bin/corral-init are written by scripts/build.sh just
// before it builds corral with -tags slimagent.
var (
	//go:embed bin/corral-agent
	slim []byte
	//go:embed bin/corral-init
	slimInit []byte
)

func init() { embedded, embeddedInit = slim, slimInit }
