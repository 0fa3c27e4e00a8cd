package peerapi

import (
	"encoding/json"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
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
