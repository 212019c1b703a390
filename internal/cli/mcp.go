package cli

import (
	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to an MCP client (Model Context Protocol, stdio)",
		Long: `Serve Corral to an MCP client (Claude Code, Claude Desktop, an IDE, any agent
framework that speaks the Model Context Protocol) on stdin and stdout: the
client starts "corral mcp" as a subprocess and the model gets tools to create,
list, inspect and remove sandboxes, run commands (exec, with a timeout and
bounded output), start, list and kill background processes, read, write and
list files, snapshot and fork sandboxes and read their egress log, and
resources for the sandboxes, their egress logs and their background
processes' output (which a client can subscribe to, to hear of new output).
process_logs can wait for new output (follow_seconds). See docs/mcp.md.

corral mcp is a client of the daemon like every other verb (--host,
CORRAL_HOST, CORRAL_TOKEN). A daemon also serves the same tools itself on
/mcp (streamable HTTP, behind its token on TCP), for clients that connect by
URL. Logs go to stderr; stdout carries the protocol only.`,
		Example: `  corral mcp
  claude mcp add corral -- corral mcp
  CORRAL_HOST=tcp://HOST:PORT CORRAL_TOKEN=... corral mcp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			// Serve even when the daemon is down: each tool call then says
			// so to the model, and works once the daemon is back.
			if err := c.Ping(cmd.Context()); err != nil {
				a.logger.Warn("the daemon does not answer yet; serving anyway", "host", a.host, "error", err)
			}
			return mcpserver.RunStdio(cmd.Context(), c, mcpserver.Options{Logger: a.logger})
		},
	}
}
