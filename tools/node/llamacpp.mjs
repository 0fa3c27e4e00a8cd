#!/usr/bin/env node
// llamacpp.mjs: llama.cpp (through node-llama-cpp) as the reference peer that Bulkhead's tests and
// benchmarks compare against. It is deliberately small and talks to llama.cpp through the
// low-level sequence API only, so that nothing node-llama-cpp adds on top (chat templates,
// grammars, repetition penalties, context shifting, token prediction) can change a result.
//
// Commands (every result is one JSON document on stdout; logs and errors go to stderr):
//   generate --model F.gguf --prompt TEXT --max-tokens N [--threads T]
//       {"completion": "...", "prompt_tokens": [...], "tokens": [...]}
//   generate --model F.gguf --prompts-json '["TEXT", ...]' --max-tokens N [--threads T]
//       [{"completion": ...}, ...]: the same for each prompt, each on a fresh context, with the
//       model loaded once (starting node and loading the library costs more than a short
//       completion)
//   bench --model F.gguf --threads T [--prompt-tokens 256] [--gen-tokens 256] [--reps 3]
//       {"prefill_tokens_per_s": ..., "decode_tokens_per_s": ..., "threads": T, "llama_cpp": "...", ...}
//   tokenize --model F.gguf --text TEXT
//       [1, 403, ...]
//
// Exit status: 0 on success, 2 on bad arguments, 1 on any other failure.

import {parseArgs} from "node:util";
import {existsSync, readFileSync} from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {performance} from "node:perf_hooks";

const usage = `usage:
  node llamacpp.mjs generate --model F.gguf (--prompt TEXT | --prompts-json JSON) --max-tokens N [--threads T]
  node llamacpp.mjs bench --model F.gguf --threads T [--prompt-tokens 256] [--gen-tokens 256] [--reps 3]
  node llamacpp.mjs tokenize --model F.gguf --text TEXT`;

class UsageError extends Error {}

function intFlag(values, name, def, min) {
    const raw = values[name];
    if (raw === undefined) {
        if (def === undefined)
            throw new UsageError(`--${name} is required`);
        return def;
    }
    if (!/^[0-9]+$/.test(raw))
        throw new UsageError(`--${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
    const n = Number(raw);
    if (n < min)
        throw new UsageError(`--${name} must be at least ${min}, got ${n}`);
    return n;
}

function parse(argv) {
    const [command, ...rest] = argv;
    const {values} = parseArgs({
        args: rest,
        strict: true,
        allowPositionals: false,
        options: {
            model: {type: "string"},
            prompt: {type: "string"},
            "prompts-json": {type: "string"},
            text: {type: "string"},
            "max-tokens": {type: "string"},
            threads: {type: "string"},
            "prompt-tokens": {type: "string"},
            "gen-tokens": {type: "string"},
            reps: {type: "string"}
        }
    });
    if (values.model === undefined)
        throw new UsageError("--model is required");
    switch (command) {
        case "generate": {
            if ((values.prompt === undefined) === (values["prompts-json"] === undefined))
                throw new UsageError("exactly one of --prompt and --prompts-json is required");
            let prompts;
            if (values["prompts-json"] !== undefined) {
                try {
                    prompts = JSON.parse(values["prompts-json"]);
                } catch (err) {
                    throw new UsageError(`--prompts-json is not JSON: ${err.message}`);
                }
                if (!Array.isArray(prompts) || prompts.length === 0 || !prompts.every((p) => typeof p === "string"))
                    throw new UsageError("--prompts-json must be a non-empty JSON array of strings");
            }
            return {
                command, model: values.model, prompt: values.prompt, prompts,
                maxTokens: intFlag(values, "max-tokens", undefined, 0),
                threads: intFlag(values, "threads", 1, 1)
            };
        }
        case "bench":
            return {
                command, model: values.model,
                threads: intFlag(values, "threads", undefined, 1),
                promptTokens: intFlag(values, "prompt-tokens", 256, 1),
                genTokens: intFlag(values, "gen-tokens", 256, 1),
                reps: intFlag(values, "reps", 3, 1)
            };
        case "tokenize":
            if (values.text === undefined)
                throw new UsageError("--text is required");
            return {command, model: values.model, text: values.text};
        default:
            throw new UsageError(`unknown command ${JSON.stringify(command ?? "")}`);
    }
}

// loadLlama loads the prebuilt CPU binary shipped in @node-llama-cpp/linux-x64. build:"never" and
// skipDownload make a missing binary an error instead of a download or a cmake build, which
// cannot work offline and would silently change what we measure.
async function loadLlama(maxThreads) {
    const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");
    return getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        maxThreads,
        logLevel: LlamaLogLevel.warn,
        // stdout carries exactly one JSON document, so every llama.cpp log line goes to stderr.
        logger: (level, message) => process.stderr.write(`llama.cpp ${level}: ${message.replace(/\n$/, "")}\n`)
    });
}

// bosPrefix returns the tokens llama.cpp's own tools put before a prompt: BOS when the vocabulary
// asks for it (tokenizer.ggml.add_bos_token), as common_tokenize(..., add_special=true) does.
function bosPrefix(model) {
    return (model.tokens.bos != null && model.tokens.shouldPrependBosToken) ? [model.tokens.bos] : [];
}

function tokenizeWithBos(model, text) {
    // specialTokens=false: the prompt is plain text, so "<s>" in it is text, not a control token.
    return [...bosPrefix(model), ...model.tokenize(text, false)];
}

async function newSequence(model, contextSize, threads) {
    const context = await model.createContext({
        sequences: 1,
        contextSize,
        // One batch holds the whole prompt, so prefill is a single llama_decode call.
        batchSize: contextSize,
        threads,
        flashAttention: false,
        // Fail instead of silently shrinking the context, which would change what we compare.
        failedCreationRemedy: false
    });
    const sequence = context.getSequence({contextShift: {size: 0}});
    return {context, sequence};
}

const greedy = {temperature: 0};

// nextToken feeds tokens into the sequence and returns the greedy choice after the last one.
async function nextToken(sequence, tokens) {
    const input = tokens.slice(0, -1);
    input.push([tokens[tokens.length - 1], {generateNext: {token: true, options: greedy}}]);
    const out = await sequence.controlledEvaluate(input);
    const tok = out[input.length - 1]?.next?.token;
    if (tok == null)
        throw new Error("llama.cpp returned no next token");
    return tok;
}

async function generate(opts) {
    const llama = await loadLlama(opts.threads);
    const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0});
    let result;
    if (opts.prompts !== undefined) {
        result = [];
        for (const prompt of opts.prompts)
            result.push(await complete(model, prompt, opts));
    } else {
        result = await complete(model, opts.prompt, opts);
    }
    await model.dispose();
    return result;
}

// complete greedily continues one prompt on a fresh context of its own.
async function complete(model, prompt, opts) {
    const promptTokens = tokenizeWithBos(model, prompt);
    if (promptTokens.length === 0)
        throw new Error("prompt tokenized to no tokens and the model adds no BOS; nothing to condition on");
    const contextSize = promptTokens.length + opts.maxTokens;
    if (contextSize > model.trainContextSize)
        throw new Error(`prompt (${promptTokens.length} tokens) + max-tokens (${opts.maxTokens}) = ${contextSize} exceeds the model's context length ${model.trainContextSize}`);
    const {context, sequence} = await newSequence(model, contextSize, opts.threads);
    const stop = new Set([model.tokens.eos, model.tokens.bos].filter((t) => t != null));
    const tokens = [];
    let feed = promptTokens;
    while (tokens.length < opts.maxTokens) {
        const tok = await nextToken(sequence, feed);
        // EOS ends a completion; BOS does too, because the TinyStories models emit it between stories.
        if (stop.has(tok) || model.isEogToken(tok))
            break;
        tokens.push(tok);
        feed = [tok];
    }
    const completion = model.detokenize(tokens, false, promptTokens);
    await context.dispose();
    return {completion, prompt_tokens: promptTokens, tokens};
}

async function tokenize(opts) {
    const llama = await loadLlama(1);
    const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0, vocabOnly: true});
    const ids = tokenizeWithBos(model, opts.text);
    await model.dispose();
    return ids;
}

// benchPrompt builds an n-token prompt of ordinary text (content does not change the cost of a
// dense forward pass, but real tokens keep the run representative).
function benchPrompt(model, n) {
    const sentence = " Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    const one = model.tokenize(sentence, false);
    if (one.length === 0)
        throw new Error("bench prompt tokenized to nothing");
    const ids = bosPrefix(model);
    while (ids.length < n)
        ids.push(...one);
    return ids.slice(0, n);
}

function median(xs) {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// packageVersion reads an installed package's version. The package's "exports" map hides its
// package.json from require.resolve, so walk up from its resolved entry point instead.
function packageVersion(name) {
    try {
        let dir = path.dirname(fileURLToPath(import.meta.resolve(name)));
        for (; dir !== path.dirname(dir); dir = path.dirname(dir)) {
            const file = path.join(dir, "package.json");
            if (existsSync(file)) {
                const pkg = JSON.parse(readFileSync(file, "utf8"));
                if (pkg.name === name)
                    return pkg.version;
            }
        }
    } catch {
        // Fall through: the version is informational only.
    }
    return "unknown";
}

async function bench(opts) {
    const llama = await loadLlama(opts.threads);
    const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0});
    const prompt = benchPrompt(model, opts.promptTokens);
    const first = bosPrefix(model).length > 0 ? bosPrefix(model) : prompt.slice(0, 1);
    const need = Math.max(opts.promptTokens, first.length + opts.genTokens);
    if (need > model.trainContextSize)
        throw new Error(`bench needs a ${need}-token context; the model's context length is ${model.trainContextSize}`);

    const prefill = [];
    const decode = [];
    let usedThreads = 0;
    // One untimed round first: the first llama_decode pays for buffer allocation and page faults.
    for (let rep = -1; rep < opts.reps; rep++) {
        // Prefill: the whole prompt in one batch, on a fresh context each rep.
        {
            const {context, sequence} = await newSequence(model, need, opts.threads);
            const t0 = performance.now();
            await sequence.evaluateWithoutGeneratingNewTokens(prompt);
            const dt = (performance.now() - t0) / 1000;
            usedThreads = context.currentThreads;
            await context.dispose();
            if (rep >= 0)
                prefill.push(opts.promptTokens / dt);
        }
        // Decode: like llama-bench's tg test, one sequence, one token per llama_decode, from a
        // context holding only the first token. EOS is fed back like any token, so every rep does
        // exactly genTokens decode steps.
        {
            const {context, sequence} = await newSequence(model, need, opts.threads);
            let tok = await nextToken(sequence, first);
            const t0 = performance.now();
            for (let i = 0; i < opts.genTokens; i++)
                tok = await nextToken(sequence, [tok]);
            const dt = (performance.now() - t0) / 1000;
            await context.dispose();
            if (rep >= 0)
                decode.push(opts.genTokens / dt);
        }
    }
    await model.dispose();
    const round = (x) => Math.round(x * 10) / 10;
    return {
        prefill_tokens_per_s: round(Math.max(...prefill)),
        decode_tokens_per_s: round(Math.max(...decode)),
        prefill_tokens_per_s_median: round(median(prefill)),
        decode_tokens_per_s_median: round(median(decode)),
        threads: opts.threads,
        threads_used: usedThreads,
        prompt_tokens: opts.promptTokens,
        gen_tokens: opts.genTokens,
        reps: opts.reps,
        llama_cpp: `${llama.llamaCppRelease.repo}@${llama.llamaCppRelease.release} (node-llama-cpp ${packageVersion("node-llama-cpp")}, ${llama.buildType} cpu)`
    };
}

async function main() {
    let opts;
    try {
        opts = parse(process.argv.slice(2));
    } catch (err) {
        process.stderr.write(`llamacpp.mjs: ${err.message}\n${usage}\n`);
        process.exit(2);
    }
    const run = {generate, bench, tokenize}[opts.command];
    const result = await run(opts);
    process.stdout.write(JSON.stringify(result) + "\n");
}

main().then(
    () => process.exit(0),
    (err) => {
        // The message goes last on stderr: callers (internal/peer) keep only the tail.
        if (process.env.LLAMACPP_PEER_DEBUG)
            process.stderr.write(`${err?.stack ?? err}\n`);
        process.stderr.write(`llamacpp.mjs: ${err?.message ?? err}\n`);
        process.exit(1);
    }
);
