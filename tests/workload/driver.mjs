#!/usr/bin/env node
// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// Decode N tokens with T threads through node-llama-cpp (real llama.cpp, CPU
// backend dlopen'ed at run time) and print what llmprofd should see.
//
//   node driver.mjs --model tiny.gguf --tokens 64 --threads 2 [--prompt 16]
//                   [--wait-go] [--hold] [--forever]
//
// Output: one JSON line on stdout,
//   {"pid", "threads", "prompt_tokens", "generated_tokens", "decoded_tokens",
//    "prompt_ms", "generate_ms", "tokens_per_s"}
// "decoded_tokens" is what llama_decode was given: the prompt plus every
// generated token but the last, which is sampled and never decoded.
// --wait-go prints {"pid", "ready": true} once the model is loaded and waits
// for a line on stdin before decoding; --hold waits for another line after.
// --forever decodes the same prompt and N tokens again and again, printing
// nothing: a neighbour that keeps decoding beside a test suite. --repeat R decodes
// them R times, then prints. --until-line decodes them again and again until a line comes on
// stdin, then ends at the end of a token and prints as after one run. --sequences S (S > 1) decodes S sequences of one context at
// once, each the prompt and N tokens (node-llama-cpp batches them into shared
// decodes), and prints {"pid", "sequences": [{"prompt_tokens", "generated_tokens"}...]}.

import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {createInterface} from "node:readline";
import {parseArgs} from "node:util";

const {values: opt} = parseArgs({
	options: {
		model: {type: "string"},
		tokens: {type: "string", default: "64"},
		threads: {type: "string", default: "2"},
		prompt: {type: "string", default: "16"},
		"wait-go": {type: "boolean", default: false},
		hold: {type: "boolean", default: false},
		forever: {type: "boolean", default: false},
		"until-line": {type: "boolean", default: false},
		repeat: {type: "string", default: "1"},
		sequences: {type: "string", default: "1"},
	},
});
if (!opt.model) {
	console.error("usage: driver.mjs --model FILE [--tokens N] [--threads T] [--prompt P]");
	process.exit(2);
}
const nGen = Number(opt.tokens), nThreads = Number(opt.threads), nPrompt = Number(opt.prompt);
const nSeq = Math.max(1, Number(opt.sequences));

const stdinLines = createInterface({input: process.stdin})[Symbol.asyncIterator]();
const waitLine = async () => { await stdinLines.next(); };
const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error,
			      maxThreads: nThreads});
const model = await llama.loadModel({modelPath: opt.model});
const context = await model.createContext({contextSize: Math.min(512, model.trainContextSize),
					   threads: {ideal: nThreads, min: nThreads},
					   batchSize: Math.max(nPrompt, 1) * nSeq,
					   sequences: nSeq});
const seq = context.getSequence();

// A fixed prompt of ordinary tokens (ids past the control and byte tokens).
const prompt = Array.from({length: nPrompt}, (_, i) => 259 + ((i * 7) % 200));

if (opt["wait-go"]) {
	emit({pid: process.pid, ready: true});
	await waitLine();
}

if (nSeq > 1) {
	const others = [seq];
	for (let s = 1; s < nSeq; s++)
		others.push(context.getSequence());
	// The same prompt in each: another could sample an end-of-generation token at once.
	const counts = await Promise.all(others.map(async (sq) => {
		let n = 0;
		for await (const _token of sq.evaluate(prompt, {temperature: 0}))
			if (++n >= nGen)
				break;
		return {prompt_tokens: prompt.length, generated_tokens: n};
	}));
	emit({pid: process.pid, sequences: counts});
	await context.dispose();
	await model.dispose();
	await llama.dispose();
	process.exit(0);
}

while (opt.forever) {
	let n = 0;
	for await (const _token of seq.evaluate(prompt, {temperature: 0}))
		if (++n >= nGen)
			break;
	await seq.clearHistory();
}

// --repeat R: the prompt and N tokens R times, the history cleared between (a prompt
// phase long enough to sample on a host that decodes it in a fraction of a second); the
// timings are the last run's, decoded_tokens all runs'.
const nRepeat = Math.max(1, Number(opt.repeat));
let stop = false;
if (opt["until-line"])
	waitLine().then(() => { stop = true; });
let generated = 0, tFirst = 0, t0 = 0, decoded = 0;
for (let r = 0; r < nRepeat || (opt["until-line"] && !stop); r++) {
	if (r > 0)
		await seq.clearHistory();
	generated = 0;
	t0 = performance.now();
	for await (const _token of seq.evaluate(prompt, {temperature: 0})) {
		if (generated === 0)
			tFirst = performance.now();
		if (++generated >= nGen || stop)
			break;
	}
	decoded += nPrompt + generated - 1;
	if (stop)
		break;
}
const t1 = performance.now();

const result = {
	pid: process.pid,
	threads: nThreads,
	prompt_tokens: nPrompt,
	generated_tokens: generated,
	decoded_tokens: decoded,
	repeats: nRepeat,
	prompt_ms: +(tFirst - t0).toFixed(3),
	generate_ms: +(t1 - tFirst).toFixed(3),
	tokens_per_s: +((generated - 1) / ((t1 - tFirst) / 1000)).toFixed(3),
};
emit(result);
if (opt.hold)
	await waitLine();
await context.dispose();
await model.dispose();
await llama.dispose();
process.exit(0);
