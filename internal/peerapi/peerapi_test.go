package peerapi

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

func TestErrorRoundTripKeepsKind(t *testing.T) {
	for k := errkind.Internal; k <= errkind.NotFound; k++ {
		in := &errkind.Error{Kind: k, Code: "c", Message: "m", Param: "p"}
		b, _ := json.Marshal(FromError(in))
		var w Error
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		out := w.Err()
		if out.Kind != k || out.Code != "c" || out.Message != "m" || out.Param != "p" {
			t.Fatalf("%v round-tripped to %+v", k, out)
		}
	}
	if (*Error)(nil).Err() != nil || FromError(nil) != nil {
		t.Fatal("nil errors must stay nil")
	}
}

// Every sampling setting crosses the wire: prefill draws the first token
// and decode the rest, and each must draw as serve would.
func TestSamplingRoundTrip(t *testing.T) {
	in := sample.Params{Temperature: 0.7, TopK: 40, TopP: 0.9, Seed: 1 << 60, PresencePenalty: -1.5, FrequencyPenalty: 0.25,
		LogitBias: []sample.Bias{{Token: 3, Bias: -100}, {Token: 9, Bias: 2.5}}, Logprobs: true, TopLogprobs: 3}
	b, err := json.Marshal(FromParams(in))
	if err != nil {
		t.Fatal(err)
	}
	var w Sampling
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	if out := w.Params(); !reflect.DeepEqual(out, in) {
		t.Fatalf("%+v crossed the wire as %s and came back as %+v", in, b, out)
	}
}

// Log probabilities cross the wire whole, and an unknown one (decode's
// first token's) stays unknown.
func TestLogprobsRoundTrip(t *testing.T) {
	in := &sample.Logprobs{Token: 7, Logprob: -0.25, Top: []sample.TokenLogprob{{Token: 7, Logprob: -0.25}, {Token: 2, Logprob: -1.5}}}
	b, err := json.Marshal(Event{Type: EventTokens, Tokens: []int{5, 7}, Logprobs: []*Logprobs{nil, FromLogprobs(in)}})
	if err != nil {
		t.Fatal(err)
	}
	var ev Event
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Logprobs) != 2 || ev.Logprobs[0] != nil || !reflect.DeepEqual(ev.Logprobs[1].Sample(), in) {
		t.Fatalf("%s came back as %+v", b, ev.Logprobs)
	}
}

// A log probability that is not finite (a masked token's -Inf) crosses
// the wire as it is, where a JSON number could not carry it.
func TestFloatCarriesInfinities(t *testing.T) {
	for _, v := range []float32{-0.5, 0, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN())} {
		b, err := json.Marshal(TokenLogprob{Token: 1, Logprob: Float(v)})
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		var back TokenLogprob
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := float32(back.Logprob); got != v && !(got != got && v != v) {
			t.Fatalf("%v crossed as %s and came back %v", v, b, got)
		}
	}
}
