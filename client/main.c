// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl's entry: global options, the command table, help and checked argument parsing. */
#include <errno.h>
#include <getopt.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct ctl_cmd *const commands[] = {
	&ctl_cmd_top,	&ctl_cmd_dump,	   &ctl_cmd_list,   &ctl_cmd_status,
	&ctl_cmd_reset, &ctl_cmd_precise,  &ctl_cmd_record, &ctl_cmd_doctor,
	&ctl_cmd_diff,	&ctl_cmd_requests, &ctl_cmd_ops,    &ctl_cmd_flame,
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* The exit statuses, with diff's own meaning of 1 where diff is concerned. */
#define EXIT_ONE "  1  the pid is not tracked by llmprofd, has exited, or is not an LLM process"
#define EXIT_DIFF ";\n     diff: the current report is slower beyond the threshold"
#define EXIT_REST                                                                              \
	"\n  2  bad command line\n"                                                            \
	"  3  llmprofd cannot be reached: not running, another socket, or no answer in time\n" \
	"  4  permission denied: only root and members of group '" LP_GROUP "' may connect, "  \
	"reset\n"                                                                              \
	"     and switch precise mode\n"                                                       \
	"  5  llmprofd answered with an error, or with something this client does not "        \
	"understand\n"
#define EXIT_DOCTOR                                                               \
	"  6  doctor: the worst finding of the processes examined is a warning\n" \
	"  7  doctor: ... is critical\n"
#define EXIT_ZERO "Exit status:\n  0  success\n" EXIT_ONE
static const char exit_statuses[] = EXIT_ZERO EXIT_DIFF EXIT_REST EXIT_DOCTOR;

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"Usage: %s [--socket PATH] [--timeout SECONDS] COMMAND [OPTIONS]\n"
		"The client of llmprofd, the always-on profiler of LLM inference processes.\n\n"
		"Commands:\n",
		prog);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n", commands[i]->name, commands[i]->summary);
	fprintf(f,
		"\nOptions (also accepted after the command):\n"
		"  --socket PATH      llmprofd's socket (default $" LP_SOCKET_ENV
		", else " LP_SOCKET_PATH ")\n"
		"  --timeout SECONDS  give up on a request after this long (default 30)\n"
		"  -h, --help         this help; '%s COMMAND --help' for a command's\n"
		"  -V, --version      print the version\n\n"
		"Examples:\n"
		"  %s top                      live view of every LLM process\n"
		"  %s top -b -n 1              one plain-text table, for scripts\n"
		"  %s dump --pid 4242          everything llmprofd knows about pid 4242\n"
		"  %s precise --pid 4242 --seconds 30\n"
		"                                     exact matmul and barrier times for 30 s\n\n"
		"%s\nSee llmprofctl(1) and llmprofd(8).\n",
		prog, prog, prog, prog, prog, exit_statuses);
}

/* Edits (insertions, deletions, substitutions) from a to b, counted up to 3. */
static unsigned edits(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned row[32], diag, up;

	if (la >= sizeof(row) / sizeof(row[0]) || lb >= sizeof(row) / sizeof(row[0]))
		return 3;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			unsigned best = diag + (a[i - 1] != b[j - 1]);

			up = row[j];
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb] < 3 ? row[lb] : 3;
}

/* The command a mistyped name was most likely meant to be: two edits at most, or a
 * prefix of one command only; NULL when none is close. */
static const struct ctl_cmd *closest(const char *s)
{
	const struct ctl_cmd *best = NULL, *prefix = NULL;
	unsigned d = 3, nprefix = 0;

	for (size_t i = 0; i < NCOMMANDS; i++) {
		unsigned e = edits(s, commands[i]->name);

		if (e < d) {
			d = e;
			best = commands[i];
		}
		if (*s && !strncmp(commands[i]->name, s, strlen(s))) {
			prefix = commands[i];
			nprefix++;
		}
	}
	return best ? best : nprefix == 1 ? prefix : NULL;
}

static void command_help(const struct ctl *c, const struct ctl_cmd *cmd)
{
	/* A command's own statuses only where it has them. */
	printf("Usage: %s %s %s\n%s\n\n%s\n%s%s%s%s", c->prog, cmd->name, cmd->usage, cmd->summary,
	       cmd->help, EXIT_ZERO, cmd == &ctl_cmd_diff ? EXIT_DIFF : "", EXIT_REST,
	       cmd == &ctl_cmd_doctor ? EXIT_DOCTOR : "");
}

int ctl_usage_error(const struct ctl *c, const struct ctl_cmd *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s%s%s: ", c->prog, cmd ? " " : "", cmd ? cmd->name : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "\nUsage: %s %s %s ('%s %s --help' for more)\n", c->prog, cmd->name,
			cmd->usage, c->prog, cmd->name);
	else
		fprintf(stderr, "\nTry '%s --help'.\n", c->prog);
	return CTL_USAGE;
}

/* s as a finite number, or false. */
static bool number(const char *s, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	return !errno && end != s && !*end && isfinite(*v);
}

/* v in s, from min (above it, with above) to max: a usage error naming the range otherwise. */
static int parse_range(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
		       const char *s, const char *what, double min, bool above, double max,
		       double *out)
{
	double v;

	if (!number(s, &v) || (above ? v <= min : v < min) || v > max)
		return ctl_usage_error(c, cmd, "%s wants %s %s %g%s %g, not '%s'", opt, what,
				       above ? "above" : "from", min, above ? ", at most" : " to",
				       max, s);
	*out = v;
	return 0;
}

int ctl_parse_seconds(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
		      const char *s, double min, double max, double *out)
{
	return parse_range(c, cmd, opt, s, "seconds", min, false, max, out);
}

int ctl_parse_seconds_above(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
			    const char *s, double min, double max, double *out)
{
	return parse_range(c, cmd, opt, s, "seconds", min, true, max, out);
}

int ctl_parse_percent(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
		      const char *s, double min, double max, double *out)
{
	return parse_range(c, cmd, opt, s, "a percentage", min, false, max, out);
}

int ctl_parse_count(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt, const char *s,
		    long min, long max, long *out)
{
	double v;

	if (!number(s, &v) || v != floor(v) || v < (double)min || v > (double)max)
		return ctl_usage_error(c, cmd, "%s wants a whole number from %ld to %ld, not '%s'",
				       opt, min, max, s);
	*out = (long)v;
	return 0;
}

int ctl_parse_pid(const struct ctl *c, const struct ctl_cmd *cmd, const char *s, int *pid)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 0x3fffffff)
		return ctl_usage_error(c, cmd, "--pid wants a process id, not '%s'", s);
	*pid = (int)v;
	return 0;
}

int ctl_process_path(const struct ctl *c, const struct ctl_cmd *cmd, int pid, const char *action,
		     char *buf, size_t len)
{
	if (!pid)
		return ctl_usage_error(c, cmd, "--pid is required");
	snprintf(buf, len, LP_ROUTE_PROCESSES "/%d%s%s", pid, action ? "/" : "",
		 action ? action : "");
	return 0;
}

static char **cur_argv;

/* The option getopt just refused, as the user wrote it. */
static const char *argv_opt(void)
{
	return optind > 0 ? cur_argv[optind - 1] : "?";
}

static int common_option(struct ctl *c, const struct ctl_cmd *cmd, int opt, int *status)
{
	switch (opt) {
	case CTL_OPT_SOCKET:
		c->socket = optarg;
		return 1;
	case CTL_OPT_TIMEOUT:
		if (ctl_parse_seconds(c, cmd, "--timeout", optarg, 0.01, 3600, &c->timeout)) {
			*status = CTL_USAGE;
			return -1;
		}
		return 1;
	case CTL_OPT_HELP:
		if (cmd)
			command_help(c, cmd);
		else
			usage(stdout, c->prog);
		*status = CTL_OK;
		return -1;
	case ':':
		*status = ctl_usage_error(c, cmd, "option '%s' needs a value", argv_opt());
		return -1;
	case '?':
		*status = ctl_usage_error(c, cmd, "unknown option '%s'", argv_opt());
		return -1;
	}
	return 0;
}

int ctl_getopt(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv, int *status)
{
	char shortopt[32];

	/* ':' first: a missing value is told apart from an unknown option; we say which. */
	snprintf(shortopt, sizeof(shortopt), ":%s", cmd->shortopt);
	cur_argv = argv;
	opterr = 0;
	for (;;) {
		int opt = getopt_long(argc, argv, shortopt, cmd->longopts, NULL), r;

		if (opt == -1) {
			/* getopt moved the operands to the end. */
			if (argc - optind > cmd->operands) {
				*status = ctl_usage_error(c, cmd, "unexpected argument '%s'",
							  argv[optind + cmd->operands]);
				return -2;
			}
			return -1;
		}
		if (opt == 'h' && !strchr(cmd->shortopt, 'h'))
			opt = CTL_OPT_HELP;
		r = common_option(c, cmd, opt, status);
		if (r < 0)
			return -2;
		if (r == 0)
			return opt;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"version", no_argument, NULL, 'V'}, CTL_COMMON_OPTS};
	/* 30 s: the first request starts a socket-activated daemon, which loads and verifies
	 * its programs twice (ExecStartPre=--check, then itself): 17 s on a busy 2-CPU host. */
	struct ctl c = {.prog = "llmprofctl", .timeout = 30};
	const char *env = getenv(LP_SOCKET_ENV);
	const struct ctl_cmd *near;
	char name[LP_ESCAPE_SIZE(40)];
	int opt, status = CTL_OK;

	setlocale(LC_ALL, "");
	/* Numbers in the documents and on the screen use a decimal point, whatever the locale. */
	setlocale(LC_NUMERIC, "C");
	c.socket = env && *env ? env : LP_SOCKET_PATH;
	/* '+': stop at the command; what follows belongs to it. */
	cur_argv = argv;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:hV", opts, NULL)) != -1) {
		if (opt == 'V') {
			printf("llmprofctl %s (API %d)\n", LLMPROF_VERSION, LP_API_VERSION);
			return CTL_OK;
		}
		if (opt == 'h')
			opt = CTL_OPT_HELP;
		if (common_option(&c, NULL, opt, &status) < 0)
			return status;
	}
	if (optind >= argc) {
		usage(stderr, c.prog);
		return CTL_USAGE;
	}
	if (!strcmp(argv[optind], "help")) {
		for (size_t i = 0; optind + 1 < argc && i < NCOMMANDS; i++)
			if (!strcmp(argv[optind + 1], commands[i]->name)) {
				command_help(&c, commands[i]);
				return CTL_OK;
			}
		usage(stdout, c.prog);
		return CTL_OK;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(argv[optind], commands[i]->name)) {
			argc -= optind;
			argv += optind;
			optind = 0; /* glibc: start afresh on the command's arguments */
			return commands[i]->exec(&c, argc, argv);
		}
	/* As typed, but escaped: a terminal obeys no byte of it. */
	lp_escape(name, sizeof(name), argv[optind], strnlen(argv[optind], 40));
	near = closest(argv[optind]);
	if (near)
		return ctl_usage_error(&c, NULL, "unknown command '%s'; did you mean '%s'?", name,
				       near->name);
	return ctl_usage_error(&c, NULL, "unknown command '%s'", name);
}
