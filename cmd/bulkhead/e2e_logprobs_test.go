package main

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestLogprobsServeAndCluster: log probabilities through a real client,
// from serve and from a cluster (1 router, 1 prefill, 1 decode), where the
// first token's come from the prefill server and the rest from decode.
// Each answer has one entry per generated token, whose texts make up the
// completion, each token among its own top alternatives when decoding is
// greedy; and the cluster's figures are serve's, bit for bit.
func TestLogprobsServeAndCluster(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("context_len: 256\nmax_input_tokens: 200\nbatch_tokens: 64\nmax_sequences: 16\nkv:\n  page_size: 16\n  pages: 64\n"+disaggTenants, ""))
	serve := startBulkhead(t, "serve", "--config", cfg)
	cluster := startBulkhead(t, "cluster", "--config", cfg, "--prefill", "1", "--decode", "1")
	ctx := context.Background()
	key := tenantKeys["acme"]

	type completion struct {
		text string
		lp   openai.CompletionChoiceLogprobs
	}
	complete := func(p *process, prompt string, temp float64) completion {
		t.Helper()
		c := p.client(key)
		resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model: "stories260K", Prompt: textPrompt(prompt), MaxTokens: openai.Int(24),
			Temperature: openai.Float(temp), Seed: openai.Int(9), Logprobs: openai.Int(3),
		})
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if n := int64(len(ch.Logprobs.Tokens)); n != resp.Usage.CompletionTokens || len(ch.Logprobs.TokenLogprobs) != int(n) || len(ch.Logprobs.TopLogprobs) != int(n) {
			t.Fatalf("%d tokens, %d logprobs, %d top lists for %d completion tokens", n, len(ch.Logprobs.TokenLogprobs), len(ch.Logprobs.TopLogprobs), resp.Usage.CompletionTokens)
		}
		if got := strings.Join(ch.Logprobs.Tokens, ""); got != ch.Text {
			t.Fatalf("the tokens spell %q; the text is %q", got, ch.Text)
		}
		for i, tok := range ch.Logprobs.Tokens {
			lp, top := ch.Logprobs.TokenLogprobs[i], ch.Logprobs.TopLogprobs[i]
			// The sampled token, then the 3 most likely (itself among them
			// when decoding is greedy).
			if !(lp <= 0) || len(top) == 0 || len(top) > 4 {
				t.Fatalf("token %d %q: logprob %v, top %v", i, tok, lp, top)
			}
			if temp == 0 && top[tok] != lp {
				t.Fatalf("greedy token %d %q (logprob %v) is not among its top alternatives %v", i, tok, lp, top)
			}
		}
		return completion{ch.Text, ch.Logprobs}
	}
	for _, c := range []struct {
		prompt string
		temp   float64
	}{{"Once upon a time", 0}, {"Lily and Tom went to the park.", 0}, {"The little dog", 0.9}} {
		want := complete(serve, c.prompt, c.temp)
		got := complete(cluster, c.prompt, c.temp)
		if got.text != want.text || !reflect.DeepEqual(got.lp.Tokens, want.lp.Tokens) ||
			!reflect.DeepEqual(got.lp.TokenLogprobs, want.lp.TokenLogprobs) || !reflect.DeepEqual(got.lp.TopLogprobs, want.lp.TopLogprobs) {
			t.Fatalf("%q at temperature %v: the cluster's log probabilities differ from serve's:\n got %q %v\nwant %q %v",
				c.prompt, c.temp, got.text, got.lp.TokenLogprobs, want.text, want.lp.TokenLogprobs)
		}
	}

	// Chat, streamed: the entries come with the chunks whose text they
	// make up, and add up to the message.
	chat := func(p *process) ([]openai.ChatCompletionTokenLogprob, string) {
		t.Helper()
		c := p.client(key)
		st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
			MaxCompletionTokens: openai.Int(20), Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
		})
		var entries []openai.ChatCompletionTokenLogprob
		var text strings.Builder
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
				entries = append(entries, ch.Choices[0].Logprobs.Content...)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		var spelled strings.Builder
		for _, e := range entries {
			spelled.WriteString(e.Token)
			if len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob || math.IsNaN(e.Logprob) {
				t.Fatalf("entry %+v", e)
			}
		}
		if spelled.String() != text.String() || len(entries) == 0 {
			t.Fatalf("%d entries spell %q; the streamed message is %q", len(entries), spelled.String(), text.String())
		}
		return entries, text.String()
	}
	want, wantText := chat(serve)
	got, gotText := chat(cluster)
	if gotText != wantText || len(got) != len(want) {
		t.Fatalf("streamed chat: the cluster said %q in %d entries, serve %q in %d", gotText, len(got), wantText, len(want))
	}
	for i := range want {
		if got[i].Token != want[i].Token || got[i].Logprob != want[i].Logprob || !reflect.DeepEqual(got[i].Bytes, want[i].Bytes) {
			t.Fatalf("streamed chat entry %d: cluster %+v, serve %+v", i, got[i], want[i])
		}
	}
}
