package audit

import (
	"fmt"
	"regexp"
)

// The over-limit check: prompts longer than the context must be refused
// at admission, never answered.

func checkOverLimit(p *Plan, res []Result) Check {
	c := Check{ID: CheckOverLimit, Title: "over-limit prompts are refused"}
	const want = "a refusal: 400 context_length_exceeded (or 413)"
	total, refused, answered, failed, longer := 0, 0, 0, 0, 0
	for i := range p.Requests {
		q, r := &p.Requests[i], &res[i]
		if q.Kind != OverLimit {
			continue
		}
		total++
		verdict, why := ClassifyOverLimit(r)
		switch verdict {
		case Pass:
			refused++
			continue
		case Fail:
			guessed := p.Config.ContextLen == 0 || p.Config.ContextLenSource != ""
			if r.OK() && guessed && r.Complete && r.UsageReported && r.PromptTokens >= p.OverLength {
				// The prompt's length was a guess, and the endpoint read
				// every token of it before answering: its context is
				// larger than the guess, which is no bug. The placeholder
				// bug answers without reading the prompt (its usage
				// shows a handful of tokens).
				longer++
				verdict, why = Warn, fmt.Sprintf("answered after reading all %d prompt tokens (usage.prompt_tokens %d): the endpoint's context is evidently longer, so this prompt was not over it; pass --context-len with the real context length to test the refusal", p.OverLength, r.PromptTokens)
				break
			}
			if r.Status >= 500 {
				failed++
			} else {
				answered++
			}
			if guessed {
				why += fmt.Sprintf(" (unless the endpoint's context really is %d tokens or more: then pass --context-len)", p.OverLength)
			}
		}
		c.add(Finding{Status: verdict, Tenant: q.Tenant, Request: q.String(), Expected: want, Got: r.describe(), Why: why})
	}
	c.Summary = fmt.Sprintf("%d of %d prompts of %d tokens refused", refused, total, p.OverLength)
	if answered > 0 {
		c.Summary += fmt.Sprintf("; %d answered with a 2xx", answered)
	}
	if failed > 0 {
		c.Summary += fmt.Sprintf("; %d failed with a 5xx after admission", failed)
	}
	if longer > 0 {
		c.Summary += fmt.Sprintf("; %d answered after reading the whole prompt, so the context is longer than %d tokens", longer, p.OverLength-1)
	}
	return c
}

// ClassifyOverLimit judges the answer to an over-limit prompt: Pass for a
// refusal (400 context_length_exceeded, or 413), Fail for any 2xx, and
// Warn, with the reason, for anything else.
func ClassifyOverLimit(r *Result) (Status, string) {
	switch {
	case r.Status == 0:
		return Warn, "no answer, so the audit cannot tell whether the prompt was refused"
	case r.OK():
		return Fail, fmt.Sprintf("over-length prompt answered with %d: the placeholder bug of DESIGN.md section 1", r.Status)
	case r.Status == 400 && contextLengthRefusal(r), r.Status == 413:
		return Pass, ""
	case r.Status == 400 && numericCode(r.ErrorCode):
		return Warn, fmt.Sprintf("refused with 400, but neither its type %q nor its message says the context length is why", r.ErrorType)
	case r.Status == 400:
		return Warn, fmt.Sprintf("refused, but with code %q rather than context_length_exceeded: the length may not be why", r.ErrorCode)
	case r.Status >= 500:
		// A server that refuses at admission answers 4xx before any work;
		// a 5xx means the prompt got past admission, as the placeholder
		// did, and whether the failure comes before or after a token
		// leaks is a matter of timing.
		return Fail, fmt.Sprintf("over-length prompt failed with %d instead of a refusal: it got past admission (the placeholder bug of DESIGN.md section 1 shows this way when the failure wins the race)", r.Status)
	default:
		return Warn, fmt.Sprintf("refused with %d, not the expected 400 context_length_exceeded", r.Status)
	}
}

// contextLengthRefusal reports an error that says the prompt is over the
// context: OpenAI's code context_length_exceeded, or, from a server whose
// code is only the HTTP status again (vLLM, llama.cpp) or absent, a type or
// message that says so. A code that names another reason is believed.
func contextLengthRefusal(r *Result) bool {
	if r.ErrorCode == "context_length_exceeded" {
		return true
	}
	if !numericCode(r.ErrorCode) {
		return false
	}
	return contextLengthWords.MatchString(r.ErrorType) || contextLengthWords.MatchString(r.ErrorMessage)
}

// contextLengthWords are how servers without OpenAI's code say a prompt is
// over the context: vLLM's "This model's maximum context length is 4096
// tokens", SGLang's "longer than the model's context length", llama.cpp's
// type exceed_context_size_error and "exceeds the available context size".
var contextLengthWords = regexp.MustCompile(`(?i)context[ _-]?(length|size|window)|maximum context|exceed_context`)

// numericCode reports a code that is empty or only digits: an HTTP status
// repeated, which names no reason.
func numericCode(c string) bool {
	for _, b := range []byte(c) {
		if b < '0' || b > '9' {
			return false
		}
	}
	return true
}
