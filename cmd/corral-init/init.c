/*
 * corral-init is PID 1 of a sandbox when the daemon runs the agent on
 * demand (agent_idle_exit, docs/isolation.md). It is written in C, not Go,
 * because it sits in every idle box: it holds about 50 KiB of memory and one
 * thread, against 450 KiB and three threads for the smallest Go program, and
 * it never needs a new thread, so a fork bomb that uses up the box's pids
 * cannot kill it.
 *
 * Usage: corral-init [--start] AGENT [ARG...]
 *        corral-init --userns-hold FLAGS
 *
 * With --userns-hold it is not an init but the daemon's holder of a box's
 * user namespace (internal/userns, Hold): see userns_hold.
 *
 * It inherits the box's listening agent socket as fd 3 (made by the daemon
 * in the box's network namespace). While no agent runs, it waits for a
 * connection on that socket, and when one is pending it starts AGENT with
 * ARGs,
 * fd 3 (the same listening socket; the connection is still queued there)
 * and fd 4, a memfd that outlives each agent and keeps its state (the
 * command defaults a warm pool's hand-out sets). The agent serves, and
 * exits by itself once idle; the next connection starts a new one. A new
 * box thus starts with no agent at all: a box that is created and removed
 * without a request never pays for one. With --start the first agent starts
 * at once instead, for a box whose creation needs it (the daemon then wires
 * the box's network while it starts).
 *
 * It reaps every orphan of the box. SIGTERM or SIGINT stops the box: the
 * agent (if any) gets SIGTERM and up to STOP_WAIT_MS to stop its commands,
 * then every process left gets SIGKILL and corral-init exits 0.
 *
 * Every agent that ends in failure (a signal, a non-zero exit) is counted:
 * the next agents get the count and how the last one ended in their
 * environment (RESTARTS_ENV, FAILURE_ENV), and report them to the daemon
 * on each answer (its agent restart metric and event).
 *
 * An agent that fails within FAST_FAIL_MS of its start is started again
 * only after BACKOFF_MS; so is one that cannot be forked (the pids limit),
 * in which case the pending connection is accepted and closed, so that the
 * daemon gets an error at once instead of a timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LISTEN_FD 3
#define STATE_FD 4
#define FAST_FAIL_MS 1000
#define BACKOFF_MS 1000
#define STOP_WAIT_MS 5000
#define RESTARTS_ENV "CORRAL_AGENT_RESTARTS"
#define FAILURE_ENV "CORRAL_AGENT_LAST_FAILURE"

static void say(const char *fmt, ...) {
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w = write(2, "corral-init: ", 13);
	w = write(2, buf, n);
	(void)w;
}

static long long now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static sigset_t handled;
static pid_t agent;            /* the running agent, 0 when none */
static long long agent_start;  /* when it was started (now_ms) */
static long long backoff_until; /* no agent before this time (now_ms) */
static unsigned long failures;  /* agents that ended in failure */
static char last_failure[64];   /* how the last of them ended */

/* spawn starts the agent. It returns 0, or -1 when fork failed. */
static int spawn(char **argv, int state) {
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (state < 0) {
			close(STATE_FD);
		} else if (state == STATE_FD) {
			fcntl(STATE_FD, F_SETFD, 0);
		} else if (dup2(state, STATE_FD) < 0) {
			_exit(126);
		}
		if (failures > 0) {
			char n[24];
			snprintf(n, sizeof n, "%lu", failures);
			setenv(RESTARTS_ENV, n, 1);
			setenv(FAILURE_ENV, last_failure, 1);
		}
		execv(argv[0], argv);
		say("exec %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	agent = pid;
	agent_start = now_ms();
	return 0;
}

/* reap collects every exited child; it notes the agent's end. */
static void reap(void) {
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid <= 0)
			return;
		if (pid != agent)
			continue;
		agent = 0;
		int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		if (failed) {
			failures++;
			if (WIFSIGNALED(st))
				snprintf(last_failure, sizeof last_failure, "killed by signal %d", WTERMSIG(st));
			else
				snprintf(last_failure, sizeof last_failure, "exited with status %d", WEXITSTATUS(st));
			say("agent %d %s", pid, last_failure);
			if (now_ms() - agent_start < FAST_FAIL_MS)
				backoff_until = now_ms() + BACKOFF_MS;
		}
	}
}

/* refuse accepts the pending connection and closes it. */
static void refuse(void) {
	int c = accept4(LISTEN_FD, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (c >= 0)
		close(c);
}

/* stop ends the box: the agent gets SIGTERM and some time, then everything
 * left gets SIGKILL. */
static void stop(int sfd) {
	if (agent > 0) {
		kill(agent, SIGTERM);
		long long deadline = now_ms() + STOP_WAIT_MS;
		while (agent > 0) {
			long long left = deadline - now_ms();
			if (left <= 0)
				break;
			struct pollfd p = {.fd = sfd, .events = POLLIN};
			if (poll(&p, 1, (int)left) > 0) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof si) == sizeof si) {
				}
			}
			reap();
		}
	}
	kill(-1, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
	}
	exit(0);
}

/*
 * userns_hold unshares the namespaces in flags (CLONE_NEWUSER and more, in
 * decimal), prints its pid and waits until stdin closes. The daemon starts
 * it as the box's base host uid, so that the new user namespace is that
 * uid's, then writes its uid_map and gid_map and binds its namespaces. One
 * C process does what would take two starts of the daemon's Go binary (a
 * Go program has threads, and a threaded process cannot unshare a user
 * namespace).
 */
static int userns_hold(const char *flags) {
	close(3); /* the memfd the daemon ran this binary from, if any */
	char *end;
	errno = 0;
	unsigned long fl = strtoul(flags, &end, 10);
	if (errno || end == flags || *end || !(fl & CLONE_NEWUSER) || fl > 0x7fffffffUL) {
		say("--userns-hold %s: want namespace flags in decimal, with CLONE_NEWUSER", flags);
		return 2;
	}
	if (unshare((int)fl) < 0) {
		say("unshare: %s", strerror(errno));
		return 1;
	}
	if (printf("%d\n", (int)getpid()) < 0 || fclose(stdout) != 0) {
		say("write pid: %s", strerror(errno));
		return 1;
	}
	char b[64];
	for (;;) {
		ssize_t n = read(0, b, sizeof b);
		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		return 0;
	}
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "--userns-hold") == 0)
		return userns_hold(argv[2]);
	int start = argc > 1 && strcmp(argv[1], "--start") == 0;
	if (start) {
		argv++;
		argc--;
	}
	if (argc < 2) {
		say("usage: corral-init [--start] AGENT [ARG...] (with a listening socket as fd 3)");
		return 2;
	}
	int acc = 0;
	socklen_t len = sizeof acc;
	if (getsockopt(LISTEN_FD, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) < 0 || !acc) {
		say("fd %d is not a listening socket", LISTEN_FD);
		return 2;
	}
	/* Box processes run as the same root: keep them out of /proc/1/fd. */
	prctl(PR_SET_DUMPABLE, 0);
	int state = memfd_create("corral-agent-state", MFD_CLOEXEC);
	if (state < 0)
		say("memfd_create: %s (agents will not keep state)", strerror(errno));

	sigemptyset(&handled);
	sigaddset(&handled, SIGCHLD);
	sigaddset(&handled, SIGTERM);
	sigaddset(&handled, SIGINT);
	if (sigprocmask(SIG_BLOCK, &handled, NULL) < 0) {
		say("sigprocmask: %s", strerror(errno));
		return 1;
	}
	int sfd = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		say("signalfd: %s", strerror(errno));
		return 1;
	}

	/* With --start the first agent starts at once, not on the first
	 * connection: it then starts while the daemon still wires the box up
	 * (network, CA). It exits when idle like any other. */
	if (start && spawn(argv + 1, state) < 0) {
		say("start the agent: %s", strerror(errno));
		backoff_until = now_ms() + BACKOFF_MS;
	}

	for (;;) {
		struct pollfd p[2] = {
		    {.fd = sfd, .events = POLLIN},
		    {.fd = LISTEN_FD, .events = POLLIN},
		};
		int n = 2, timeout = -1;
		if (agent > 0) {
			n = 1;
		} else if (backoff_until > 0) {
			long long left = backoff_until - now_ms();
			if (left > 0) {
				n = 1;
				timeout = (int)left;
			} else {
				backoff_until = 0;
			}
		}
		int r = poll(p, n, timeout);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			say("poll: %s", strerror(errno));
			return 1;
		}
		if (p[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			int term = 0;
			while (read(sfd, &si, sizeof si) == sizeof si) {
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
					term = 1;
			}
			reap();
			if (term)
				stop(sfd);
		}
		if (n < 2)
			continue;
		if (p[1].revents & (POLLERR | POLLNVAL)) {
			say("the agent socket (fd %d) failed", LISTEN_FD);
			return 1;
		}
		if ((p[1].revents & POLLIN) && agent == 0) {
			if (spawn(argv + 1, state) < 0) {
				say("start the agent: %s", strerror(errno));
				refuse();
				backoff_until = now_ms() + BACKOFF_MS;
			}
		}
	}
}
