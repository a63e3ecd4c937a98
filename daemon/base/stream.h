/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* An answer written as it is made (a record's timeline, streamed): its producer appends
 * bytes and says when it is done; the transport sends them on as they come and says when
 * its peer went away. Either may let go first: the last of the two frees it. On the event
 * loop only. */
#ifndef LLMPROF_STREAM_H
#define LLMPROF_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lp_stream {
	unsigned refs;
	const char *content_type;
	/* The producer's: bytes the transport has not taken yet; the end is written. */
	uint8_t *p;
	size_t len, cap;
	bool ended;
	/* The transport's: its peer went away before the end; bytes it holds, not yet sent. */
	bool gone;
	size_t queued;
	/* Set by the transport: called when there are bytes to take, or the end. */
	void (*notify)(void *arg);
	void *arg;
	uint64_t written; /* bytes the producer wrote in all */
	/* A deferred answer (a profile's window): the transport sends nothing, headers
	 * included, until the producer ends it; then the whole of it, with this status and
	 * these extra headers ("Name: value" lines). */
	bool deferred;
	int status;
	char headers[256];
};

/* One reference, the caller's. NULL: no memory. */
struct lp_stream *lp_stream_new(const char *content_type);
struct lp_stream *lp_stream_get(struct lp_stream *s);
/* Lets go of a reference (NULL: nothing). */
void lp_stream_put(struct lp_stream *s);

/* Appends n bytes and tells the transport. Returns 0, -EPIPE (the peer went away: nobody
 * will read them) or -ENOMEM. */
int lp_stream_write(struct lp_stream *s, const void *p, size_t n);
/* The producer's last word: the transport ends the answer once it has sent the rest. */
void lp_stream_end(struct lp_stream *s);
/* Bytes written and not sent yet: the producer holds back past a bound of its own. */
size_t lp_stream_backlog(const struct lp_stream *s);

/* The transport's side: the bytes waiting are taken (the caller sends them), and the peer
 * went away. */
void lp_stream_taken(struct lp_stream *s);
void lp_stream_gone(struct lp_stream *s);

#endif
