// Command corral is Corral's single binary: the daemon (corral serve), the
// in-sandbox agent (corral agent) and the docker-like CLI (every other verb).
package main

import (
	"context"
	"os"

	"github.com/corral-sandbox/corral/internal/cli"
)

func main() {
	os.Exit(cli.Execute(context.Background()))
}
