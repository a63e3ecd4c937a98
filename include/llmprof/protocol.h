/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The daemon <-> client contract: HTTP/1.1 with JSON bodies over a Unix socket.
 *
 * Only the daemon's API layer (daemon/serving/api.c, daemon/serving/server.c) and client/ include this file;
 * docs/API.md describes every route with examples.
 *
 * Compatibility: documents only gain fields within an API version, and readers ignore fields
 * they do not know. Request bodies are checked strictly (an unknown field is a 400, so a
 * typo is never silently ignored); so a new request field, route or error code, or a field
 * whose meaning changes, bumps LP_API_VERSION, and a client that would send one reads
 * GET /v1/version first. LP_API_MIN_VERSION is the oldest version whose requests this
 * daemon still serves unchanged.
 */
#ifndef LLMPROF_PROTOCOL_H
#define LLMPROF_PROTOCOL_H

#define LP_API_VERSION 1
#define LP_API_MIN_VERSION 1

/* Where the daemon listens, and how clients are pointed elsewhere. */
#define LP_SOCKET_PATH "/run/llmprofd/llmprofd.sock"
#define LP_SOCKET_ENV "LLMPROF_SOCKET"
/* Members of this group (and root) see every process and may reset and switch precise mode;
 * other peers see the processes of their own uid only. */
#define LP_GROUP "llmprof"
/* The optional TCP listener serves /metrics only. */
#define LP_METRICS_ADDRESS "127.0.0.1:9713"

/* Routes. {pid} is a decimal process id. */
#define LP_ROUTE_VERSION "/v1/version"	   /* GET: the API version, for clients to check first */
#define LP_ROUTE_STATUS "/v1/status"	   /* GET: the daemon itself */
#define LP_ROUTE_PROCESSES "/v1/processes" /* GET: every visible process, summary figures */
/* GET /v1/processes/{pid}: one process in full (the document of `llmprofd --once`)
 * POST /v1/processes/{pid}/reset: zero its counters and histograms
 * POST /v1/processes/{pid}/precise: body {"seconds": S} (default 60) or {"enable": false}
 * POST /v1/processes/{pid}/record: body {"seconds": S, "ops": B} (default 5 s, op spans on):
 *   records a timeline, 202; GET /v1/processes/{pid}/record: 202 while it records, then
 *   200 and the Chrome Trace Event Format document (ui.perfetto.dev opens it) */
/* GET /v1/processes/{pid}/findings: why its tokens/s is low (docs/API.md, "Findings") */
#define LP_ROUTE_FINDINGS "findings"
#define LP_ROUTE_RESET "reset"
#define LP_ROUTE_PRECISE "precise"
#define LP_ROUTE_RECORD "record"
/* GET /v1/processes/{pid}/requests: its requests, from llama_decode's batches (docs/API.md,
 * "Requests") */
#define LP_ROUTE_REQUESTS "requests"
/* GET: the host's measured memory read bandwidth; POST: measure it (again), 202 */
#define LP_ROUTE_BANDWIDTH "/v1/bandwidth"
#define LP_ROUTE_METRICS "/metrics" /* GET: Prometheus text exposition format 0.0.4 */
/* GET ?seconds=S&pid=N&phase=P: the samples of the next S seconds, as Go's net/http/pprof
 * answers (gzip'ed profile.proto), and as folded stacks (stackcollapse's text); also on
 * the TCP listener (docs/API.md, "Profiles") */
#define LP_ROUTE_PPROF "/debug/pprof/profile"
#define LP_PROFILE_MAX_SECONDS 300
#define LP_PROFILE_DEFAULT_SECONDS 30
#define LP_ROUTE_FOLDED "/debug/pprof/folded"

/* "report_format" of a process's document and of `llmprofd --once`'s report: bump it when
 * a figure that `llmprofctl diff` compares changes meaning. */
#define LP_REPORT_FORMAT 1

/* Request limits: beyond them the request is refused with the status below. */
#define LP_MAX_HEADERS_BYTES 8192 /* 431 (evhttp says 413; the error code tells them apart) */
#define LP_MAX_BODY_BYTES 4096	  /* 413 */
#define LP_PRECISE_MAX_SECONDS 86400
#define LP_RECORD_MAX_SECONDS 60
#define LP_RECORD_DEFAULT_SECONDS 5

/* Every error is {"error": {"code": CODE, "message": "..."}} with one of these codes. */
#define LP_ERR_BAD_REQUEST "bad_request"		   /* 400: malformed request or body */
#define LP_ERR_UNAUTHORIZED "unauthorized"		   /* 401: TCP, no or wrong credentials */
#define LP_ERR_FORBIDDEN "forbidden"			   /* 403: not root nor in LP_GROUP */
#define LP_ERR_NOT_FOUND "not_found"			   /* 404: no such route */
#define LP_ERR_NO_SUCH_PROCESS "no_such_process"	   /* 404: the pid is not tracked */
#define LP_ERR_METHOD "method_not_allowed"		   /* 405, with an Allow header */
#define LP_ERR_TOO_LARGE "too_large"			   /* 413: body or headers too large */
#define LP_ERR_NOT_LLM "not_an_llm_process"		   /* 409: precise mode needs ggml */
#define LP_ERR_EXITED "process_exited"			   /* 409: the process has exited */
#define LP_ERR_BUSY "busy"				   /* 409: a record of it is running */
#define LP_ERR_NOT_RECORDING "not_recording"		   /* 409: stop, and no record of it runs */
#define LP_ERR_TOO_MANY_CONNECTIONS "too_many_connections" /* 503 */
#define LP_ERR_TOO_MANY_PROFILES "too_many_profiles"	   /* 503: windows open, at most */
#define LP_ERR_NO_SAMPLING "no_sampling"		   /* 503: profiles need the sampler */
#define LP_ERR_INTERNAL "internal"			   /* 500 */
#define LP_ERR_NOT_IMPLEMENTED "not_implemented"	   /* 501: a transfer coding */

#endif
