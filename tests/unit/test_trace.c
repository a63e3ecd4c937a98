// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/timeline/trace.c on events made up to the microsecond: each slice where the events put it
 * (running, preempted by whom, a futex wait then runnable, blocked), spans closed at the
 * window's edges, hostile names escaped into valid JSON, counters. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "timeline/trace.h"

#define T0 1000000000ULL /* the window's start, ns */
#define US 1000ULL

static struct lp_rec_ev ev(uint64_t us, uint32_t tid, uint8_t type, uint8_t reason, uint64_t a)
{
	return (struct lp_rec_ev){.ts = T0 + us * US,
				  .tgid = 100,
				  .tid = tid,
				  .type = type,
				  .reason = reason,
				  .cpu = 1,
				  .a = a};
}

/* The "X" event named name on track tid, or NULL. */
static const cJSON *slice(const cJSON *events, unsigned tid, const char *name)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, events)
	{
		const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *n = cJSON_GetObjectItem(e, "name"),
			    *t = cJSON_GetObjectItem(e, "tid");

		if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "X") && cJSON_IsString(n) &&
		    !strcmp(n->valuestring, name) && cJSON_IsNumber(t) && t->valuedouble == tid)
			return e;
	}
	return NULL;
}

static bool at(const cJSON *e, double ts, double dur)
{
	return e && fabs(cJSON_GetObjectItem(e, "ts")->valuedouble - ts) < 0.001 &&
	       fabs(cJSON_GetObjectItem(e, "dur")->valuedouble - dur) < 0.001;
}

int main(void)
{
	/* Thread 101: runs from the window's start to 100 us, preempted by "hog\"\n\e[31m"
	 * 7 until 150 (run-queue wait 50, known at its next switch-out), runs to 300, futex
	 * wait on 0x1234 until 500 of which the last 20 us runnable, runs to 600, blocked to
	 * the window's end (1000). Thread 102: a decode span of 1 token from 10 to 900 with an
	 * op (index 0) from 20 to 400 inside, and a barrier begun before the window. */
	struct lp_rec_ev v[] = {
		ev(100, 101, LP_REC_OFF, LP_OFF_PREEMPTED, 0),
		ev(150, 101, LP_REC_ON, 0, 0),
		ev(300, 101, LP_REC_OFF, LP_OFF_FUTEX, 0x1234),
		ev(500, 101, LP_REC_ON, 0, 0),
		ev(600, 101, LP_REC_OFF, LP_OFF_BLOCKED, 0),
		ev(700, 103, LP_REC_OFF, LP_OFF_BLOCKED, 0),
		ev(800, 103, LP_REC_ON, 0, 0),
		ev(800, 103, LP_REC_FAULT_MAJ, 0, 0),
		ev(850, 103, LP_REC_OFF, LP_OFF_BLOCKED, 0),
		ev(10, 102, LP_REC_DECODE_BEGIN, 0, 1),
		ev(20, 102, LP_REC_OP_BEGIN, 0, 0),
		ev(400, 102, LP_REC_OP_END, 0, 0), /* [11] */
		ev(900, 102, LP_REC_DECODE_END, 0, 0),
		ev(950, 102, LP_REC_BARRIER_END, 0, 0),
		ev(960, 102, LP_REC_FAULT_MAJ, 0, 0),
	};
	const char *ops[] = {"mul_mat"}, *groups[] = {"matmul"};
	/* The node the op computed: a matmul of layer 3 whose name another user chose. */
	struct lp_node node = {.key = {.tgid = 100,
				       .layer = 3,
				       .type = {0, 8, 0, LP_NODE_NO_TYPE},
				       .ne = {{2816, 1, 1, 1}, {1024, 2816, 1, 1}, {1024, 1, 1, 1}},
				       .stem = "ffn\"up\x1b[2J"},
			       .val = {.id = 0xfeedf00d00000001ULL,
				       .instances = 2,
				       .calls = 4,
				       .rd_bytes = 2 * 3067904,
				       .wr_bytes = 2 * 11264}};
	struct lp_tl_node nodes[2];
	struct lp_trace_map maps[] = {{0x1000, 0x2000, "/usr/lib/libgomp\n.so"}};
	struct lp_trace_thread th[] = {{101, "worker\x1b[2J"}, {102, "main"}};
	struct lp_trace_in in = {.pid = 100,
				 .comm = "llama\"simple",
				 .start_ns = T0,
				 .end_ns = T0 + 1000 * US,
				 .ev = v,
				 .n = sizeof(v) / sizeof(v[0]),
				 .threads = th,
				 .nthreads = 2,
				 .op_names = ops,
				 .op_groups = groups,
				 .nops = 1,
				 .maps = maps,
				 .nmaps = 1,
				 .lost = 3,
				 .version = "test"};
	const cJSON *events, *e;
	char *out = NULL;
	size_t len = 0;
	cJSON *doc;

	/* The preemptor's comm, as another user may set it. */
	v[0].other = 7;
	memcpy(v[0].comm, "hog\"\n\x1b[31m", 10);
	v[2].runq = 50 * US; /* ends the preempted stretch: all of it runnable anyway */
	v[4].runq = 20 * US; /* the wait before the 500-600 slice: the futex stretch's tail */
	lp_tl_node_make(&nodes[0], &node, "mul_mat");
	node.val.id = 5;
	lp_tl_node_make(&nodes[1], &node, "get_rows");
	lp_tl_nodes_sort(nodes, 2);
	in.nodes = nodes;
	in.nnodes = 2;
	v[11].node = 0xfeedf00d00000001ULL;

	CHECK(lp_trace_render(&in, &out, &len) == 0 && len == strlen(out), "rendered");
	doc = cJSON_Parse(out);
	CHECK(doc != NULL, "valid JSON:\n%s", out);
	if (!doc)
		return check_done();
	events = cJSON_GetObjectItem(doc, "traceEvents");
	CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "otherData"), "events_lost")
			      ->valuedouble == 3,
	      "lost events in the metadata");
	CHECK(!strchr(out, '\x1b') && strstr(out, "\\\\x1b"),
	      "no terminal escape reaches the file");

	unsigned cpu = 101 + LP_TRACE_CPU_TRACK;
	CHECK(at(slice(events, cpu, "running"), 0, 100), "running from the window's start to 100");
	e = slice(events, cpu, "preempted by hog\"\\x0a\\x1b[31m 7");
	CHECK(at(e, 100, 50), "preempted by the escaped comm and pid, 100 to 150");
	CHECK(e && cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "by_pid")->valuedouble == 7,
	      "by_pid in its args");
	e = slice(events, cpu, "futex wait 0x1234");
	CHECK(at(e, 300, 180), "the futex wait, 300 to 480: the last 20 us were spent runnable");
	CHECK(e && !strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "object")
				   ->valuestring,
			   "/usr/lib/libgomp\\x0a.so"),
	      "the futex word's mapping, escaped");
	CHECK(at(slice(events, 103 + LP_TRACE_CPU_TRACK, "blocked: major fault"), 700, 100),
	      "a blocked stretch that a major fault ended says so");
	CHECK(at(slice(events, 103 + LP_TRACE_CPU_TRACK, "blocked"), 850, 150),
	      "the next one does not");
	CHECK(at(slice(events, cpu, "runnable"), 480, 20), "runnable from 480 to 500");
	CHECK(at(slice(events, cpu, "blocked"), 600, 400), "blocked to the window's end");

	e = slice(events, 102, "llama_decode: generation");
	CHECK(at(e, 10, 890), "the decode span");
	e = slice(events, 102, "mul_mat");
	CHECK(at(e, 20, 380) && !strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "group")
						->valuestring,
					"matmul"),
	      "the op span, named and grouped");
	{
		const cJSON *a = e ? cJSON_GetObjectItem(e, "args") : NULL,
			    *tensor = cJSON_GetObjectItem(a, "tensor"),
			    *shape = cJSON_GetObjectItem(a, "shape");

		CHECK(cJSON_IsString(tensor) && !strcmp(tensor->valuestring, "ffn\"up\\x1b[2J-3") &&
			      cJSON_IsString(shape) &&
			      !strcmp(shape->valuestring,
				      "[1024,2816]q8_0 x [1024,1]f32 -> [2816,1]f32") &&
			      cJSON_GetObjectItem(a, "layer")->valuedouble == 3 &&
			      !strcmp(cJSON_GetObjectItem(a, "block")->valuestring, "ffn") &&
			      cJSON_GetObjectItem(a, "bytes")->valuedouble == 3067904 + 11264 &&
			      cJSON_GetObjectItem(a, "flops")->valuedouble == 2.0 * 1024 * 2816,
		      "the op span's node: its name escaped, shapes, layer, block, bytes and FLOPs "
		      "of one evaluation: %s",
		      a ? cJSON_PrintUnformatted(a) : "none");
		CHECK(lp_tl_node_find(nodes, 2, 5) == &nodes[0] && !lp_tl_node_find(nodes, 2, 6) &&
			      !lp_tl_node_find(nodes, 2, 0) && !nodes[0].flops &&
			      nodes[0].bytes == 1088 + 4096 + 11264,
		      "nodes found by id; an indexed op's bytes its rows', a non-matmul's FLOPs 0");
	}
	CHECK(at(slice(events, 102, "barrier"), 0, 950), "a barrier begun before the window");

	/* Names: escaped, with each thread's CPU track named after it. */
	CHECK(strstr(out, "\"llama\\\"simple\"") != NULL, "the process name, quote escaped");
	CHECK(strstr(out, "\"worker\\\\x1b[2J 101 CPU\"") != NULL, "the CPU track's name");

	/* Counters: the major fault, and threads on CPU (1 at the start: 101 was running). */
	int faults = 0, first_on = -1, max_runnable = 0;

	cJSON_ArrayForEach(e, events)
	{
		const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring,
			   *n = cJSON_GetObjectItem(e, "name")->valuestring;

		if (strcmp(ph, "C"))
			continue;
		if (!strcmp(n, "major faults"))
			faults++;
		if (!strcmp(n, "threads runnable"))
			max_runnable =
				fmax(max_runnable,
				     cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "value")
					     ->valuedouble);
		if (!strcmp(n, "threads on CPU") && first_on < 0)
			first_on = (int)cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "value")
					   ->valuedouble;
	}
	CHECK(faults == 2 && first_on == 2, "counters: %d faults, %d on CPU at the start", faults,
	      first_on);
	CHECK(max_runnable == 2, "threads runnable at most 2 (101 and 103 from the start): %d",
	      max_runnable);
	cJSON_Delete(doc);
	free(out);

	/* A switch-in the kernel did not report (thread 201): switched out into a futex wait at
	 * 100, out again at 400 after a slice of 30 us on CPU by the kernel's account, with a
	 * run-queue wait of 20 before it. The wait ended at 350, the slice began at 370. */
	{
		struct lp_rec_ev w[] = {
			ev(100, 201, LP_REC_OFF, LP_OFF_FUTEX, 0x1234),
			ev(400, 201, LP_REC_OFF, LP_OFF_BLOCKED, 0),
		};

		w[1].oncpu = 30 * US;
		w[1].runq = 20 * US;
		in.ev = w;
		in.n = 2;
		CHECK(lp_trace_render(&in, &out, &len) == 0 && (doc = cJSON_Parse(out)),
		      "rendered with a switch-in unseen");
		events = cJSON_GetObjectItem(doc, "traceEvents");
		cpu = 201 + LP_TRACE_CPU_TRACK;
		CHECK(at(slice(events, cpu, "futex wait 0x1234"), 100, 250),
		      "the futex wait ends where the slice's run-queue wait began: 100 to 350");
		CHECK(at(slice(events, cpu, "runnable"), 350, 20), "runnable 350 to 370");
		CHECK(at(slice(events, cpu, "running"), 0, 100), "running from the start to 100");
		e = NULL;
		cJSON_ArrayForEach(e, events)
		{
			const cJSON *n = cJSON_GetObjectItem(e, "name");

			if (cJSON_IsString(n) && !strcmp(n->valuestring, "running") &&
			    cJSON_GetObjectItem(e, "tid")->valuedouble == cpu &&
			    cJSON_GetObjectItem(e, "ts")->valuedouble > 100)
				break;
		}
		CHECK(at(e, 370, 30) && cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "cpu")
							->valuedouble == 1,
		      "and from 370 to 400, on the CPU it left");
		CHECK(at(slice(events, cpu, "blocked"), 400, 600), "then blocked to the end");
		cJSON_Delete(doc);
		free(out);
	}

	/* torch's steps (thread 301): forwards of a batch of 4 sequences, each ending where the
	 * next begins, their phase in the event; the spans named after the engine's step, the
	 * tokens/s counter 4 tokens per 200 us. A prompt forward of 4 x 8 tokens first. */
	{
		struct lp_rec_ev w[] = {
			ev(50, 301, LP_REC_DECODE_BEGIN, LP_PHASE_PROMPT, 32),
			ev(100, 301, LP_REC_DECODE_END, 0, 0),
			ev(100, 301, LP_REC_DECODE_BEGIN, LP_PHASE_GENERATION, 4),
			ev(300, 301, LP_REC_DECODE_END, 0, 0),
			ev(300, 301, LP_REC_DECODE_BEGIN, LP_PHASE_GENERATION, 4),
			ev(500, 301, LP_REC_DECODE_END, 0, 0),
			ev(500, 301, LP_REC_DECODE_BEGIN, LP_PHASE_GENERATION, 4),
		};
		int rates = 0;

		in.ev = w;
		in.n = sizeof(w) / sizeof(w[0]);
		in.step = "forward";
		CHECK(lp_trace_render(&in, &out, &len) == 0 && (doc = cJSON_Parse(out)),
		      "rendered torch's steps");
		events = cJSON_GetObjectItem(doc, "traceEvents");
		CHECK(at(slice(events, 301, "forward: prompt (32 tokens)"), 50, 50),
		      "the prompt forward, named after the step");
		CHECK(at(slice(events, 301, "forward: generation"), 100, 200),
		      "a generation forward of a batch of 4 is a generation step");
		cJSON_ArrayForEach(e, events)
		{
			const cJSON *n = cJSON_GetObjectItem(e, "name");

			if (cJSON_IsString(n) && !strcmp(n->valuestring, "tokens/s")) {
				double r =
					cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "value")
						->valuedouble;

				CHECK(fabs(r - 4 / 200e-6) < 1e-6, "tokens/s 4 per 200 us: %g", r);
				rates++;
			}
		}
		CHECK(rates == 2, "a rate at each generation step after the first: %d", rates);
		cJSON_Delete(doc);
		free(out);
		in.step = NULL;
	}

	/* No events at all: still a document. */
	in.n = 0;
	CHECK(lp_trace_render(&in, &out, &len) == 0 && (doc = cJSON_Parse(out)),
	      "an empty window renders");
	cJSON_Delete(doc);
	free(out);
	return check_done();
}
