package api

import (
	"strings"
	"testing"
)

// A top_p too small for float32 still restricts sampling to the most
// likely token: rounded to 0 it would mean "keep all" to the sampler, the
// opposite of what the client asked.
func TestTinyTopPStaysPositive(t *testing.T) {
	var req completionRequest
	if err := decodeBody(strings.NewReader(`{"model":"stories260K","prompt":"x","top_p":1e-50}`), &req); err != nil {
		t.Fatal(err)
	}
	g, err := req.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if g.sampling.TopP <= 0 {
		t.Fatalf("top_p 1e-50 became %v, which the sampler reads as off", g.sampling.TopP)
	}
}
