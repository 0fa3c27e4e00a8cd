package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// refUnknown is the field check written the slow, obvious way, on
// encoding/json's tokenizer: the path of the first key that s does not
// name exactly, or "".
func refUnknown(dec *json.Decoder, s *shape, path string) string {
	tok, _ := dec.Token()
	d, ok := tok.(json.Delim)
	if !ok {
		return ""
	}
	switch {
	case d == '{' && s != nil && (s.fields != nil || s.mapValues):
		for dec.More() {
			k, _ := dec.Token()
			key := k.(string)
			p := key
			if key == "" {
				p = `""`
			}
			if path != "" {
				p = path + "." + p
			}
			vs := s.elem
			if !s.mapValues {
				fs, ok := s.fields[key]
				if !ok {
					return p
				}
				vs = fs
			}
			if r := refUnknown(dec, vs, p); r != "" {
				return r
			}
		}
	case d == '[' && s != nil && s.fields == nil && !s.mapValues && s.elem != nil:
		for i := 0; dec.More(); i++ {
			if r := refUnknown(dec, s.elem, fmt.Sprintf("%s[%d]", path, i)); r != "" {
				return r
			}
		}
	default: // skipped: read to the matching close
		for depth := 1; depth > 0; {
			tok, _ := dec.Token()
			if d, ok := tok.(json.Delim); ok {
				if d == '{' || d == '[' {
					depth++
				} else {
					depth--
				}
			}
		}
		return ""
	}
	dec.Token() // the closing delimiter
	return ""
}

// FuzzFieldCheck holds the byte-level field check to the tokenizer-based
// reference on every valid JSON document, for both request types.
func FuzzFieldCheck(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\"}"},{"TYPE":1}]}]}`,
		`{"stream_options":{"include_usage":true,"x":[{"y":"]"}]},"metadata":{"A":"b"}}`,
		`{"response_format":{"type":"json_schema","json_schema":{"schema":{"a":[1,{"b":null}]},"Strict":true}}}`,
		`{"max\u005ftokens":1,"\u004dax_tokens":2}`,
		` [ {"a" : 1e-3 } , "x" ] `, `"s"`, `12`, `{}`, `{"messages":{"foo":1},"logit_bias":[{"x":1}]}`,
		"{\"\xff\":1}",
	} {
		f.Add([]byte(s))
	}
	shapes := []*shape{shapeFor(new(chatRequest)), shapeFor(new(completionRequest))}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		for _, s := range shapes {
			want := refUnknown(json.NewDecoder(bytes.NewReader(body)), s, "")
			got := ""
			if err := checkFields(body, s); err != nil {
				got = err.Param
				if got == "" || err.Code != "unknown_parameter" || !strings.Contains(err.Message, "unknown parameter") {
					t.Fatalf("error %+v", err)
				}
			}
			if got != want {
				t.Fatalf("%q: field check says %q, reference says %q", body, got, want)
			}
		}
	})
}

// BenchmarkDecodeChat measures decodeBody, field check included, on a
// typical chat body.
func BenchmarkDecodeChat(b *testing.B) {
	body := `{"model":"stories260K","messages":[{"role":"system","content":"Be brief."},` +
		`{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("Once upon a time. ", 200) + `"}]}],` +
		`"max_tokens":64,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},"metadata":{"k":"v"}}`
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var req chatRequest
		if err := decodeBody(strings.NewReader(body), &req); err != nil {
			b.Fatal(err)
		}
	}
}
