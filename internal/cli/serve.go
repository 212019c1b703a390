package cli

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/agent"
	"github.com/corral-sandbox/corral/internal/daemon"
	"github.com/corral-sandbox/corral/internal/log"
)

func (a *app) serveCmd() *cobra.Command {
	var configPath, root, listen, tokenFile, tlsCert, tlsKey, e2bDomain string
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the corral daemon",
		Long: `Run the corral daemon: it owns sandboxes and images and serves the API on its
unix socket (and on --listen with a bearer token). The configuration is read
from --config (TOML, version = 1); flags override it. SIGINT or SIGTERM stop
the daemon gracefully; sandboxes keep running and the next daemon takes them
back. Started by systemd with Type=notify (contrib/systemd/corral.service),
it reports READY=1 on $NOTIFY_SOCKET once the API listens. Logs go to stderr.

With --tls-cert and --tls-key, --listen serves HTTPS (the files are read
again when they change). --e2b-domain serves E2B's domain mode on it:
{port}-{sandboxID}.DOMAIN reaches the box's agent (port 49983) or that port
in the box; it needs a wildcard DNS record and certificate (docs/e2b.md).`,
		Example: `  corral serve
  corral serve --config /etc/corral/config.toml --log-level debug
  corral serve --listen 127.0.0.1:7070 --token-file /etc/corral/token
  corral serve --listen :443 --token-file /etc/corral/token \
    --tls-cert /etc/corral/tls/cert.pem --tls-key /etc/corral/tls/key.pem --e2b-domain sandbox.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := daemon.LoadConfig(configPath)
			if err != nil {
				return err
			}
			fs := cmd.Flags()
			if fs.Changed("root") {
				cfg.Root = root
			}
			if fs.Changed("listen") {
				cfg.Listen = listen
			}
			if fs.Changed("token-file") {
				cfg.TokenFile = tokenFile
			}
			if fs.Changed("tls-cert") {
				cfg.TLSCertFile = tlsCert
			}
			if fs.Changed("tls-key") {
				cfg.TLSKeyFile = tlsKey
			}
			if fs.Changed("e2b-domain") {
				cfg.E2B.Domain = e2bDomain
			}
			switch {
			case cmd.Flags().Changed("log-level"):
				cfg.LogLevel = a.logLevel
			case cfg.LogLevel == "":
				cfg.LogLevel = "info" // a daemon logs what it does by default
			}
			lvl, err := log.ParseLevel(cfg.LogLevel)
			if err != nil {
				return fmt.Errorf("log level %q: want debug, info, warn or error", cfg.LogLevel)
			}
			l := slog.New(slog.NewTextHandler(a.streams.Err, &slog.HandlerOptions{Level: lvl}))
			return daemon.Run(log.WithLogger(cmd.Context(), l), cfg)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", daemon.DefaultConfigPath, "configuration file (TOML)")
	cmd.Flags().StringVar(&root, "root", "", "state directory (overrides the config's root)")
	cmd.Flags().StringVar(&listen, "listen", "", "also serve the API on this TCP address, e.g. 127.0.0.1:7070 (needs --token-file)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token required on --listen")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "serve HTTPS on --listen with this certificate chain (PEM; needs --tls-key)")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	cmd.Flags().StringVar(&e2bDomain, "e2b-domain", "", "serve E2B's domain mode: {port}-{sandboxID}.DOMAIN[:port] (docs/e2b.md)")
	return cmd
}

func (a *app) agentCmd() *cobra.Command {
	var cfg agent.Config
	cmd := &cobra.Command{
		Use:   "agent [flags]",
		Short: "Run the in-sandbox agent (started in every sandbox by its PID 1)",
		Long: `Run the in-sandbox agent. In every sandbox, corral-init (PID 1) starts it on
the first connection to the box's agent socket, passed as fd 3, with
--under-init; it exits after --idle-exit without requests, commands or
watchers, and the next connection starts a new one. Without corral-init (a
corral not built by scripts/build.sh) the agent itself is PID 1 for the box's
life. It serves process and file operations over Connect RPC (E2B
envd-compatible). It is not meant to be started by hand, except for tests
with --listen.

A corral built with scripts/build.sh carries a slim copy of the agent
(corral-agent, the agent without the rest of corral) and the daemon runs that
one: it holds less memory per sandbox. This command is the same
agent, used when the slim copy is missing or was built from other sources.`,
		Example: `  corral agent --listen-fd 3
  corral agent --listen unix:///tmp/agent.sock`,
		Hidden: false,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return agent.Run(cmd.Context(), cfg)
		},
	}
	gofs := flag.NewFlagSet("agent", flag.ContinueOnError)
	cfg.AddFlags(gofs)
	cmd.Flags().AddGoFlagSet(gofs)
	return cmd
}
