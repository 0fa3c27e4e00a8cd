package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// BULKHEAD_KERNELS picks the kernel family for the whole process. Each
// family this machine runs must be the one the process reports using, and
// must print the same completion for a Q8_0 model (the prompt is long
// enough for the batched kernels, sixteen tokens at a time where the CPU
// has AVX-512 VNNI); a name the process cannot run must stop it with a
// clear error before it does anything.
func TestKernelsEnv(t *testing.T) {
	bin := bulkheadBinary(t)
	model := convertEmbedded(t, "q8_0")
	run := func(family string, args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), kernelsEnv+"="+family)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	gen := func(family string) (string, string, error) {
		return run(family, "generate", "--model", model, "--prompt",
			"Once upon a time, in a big forest, there was a little bunny named Tom who liked to hop and play with his friends",
			"--max-tokens", "60", "--temperature", "0")
	}
	want, errOut, err := gen("auto")
	if err != nil || want == "" {
		t.Fatalf("auto: %v, %q\n%s", err, want, errOut)
	}
	// Empty is auto, as unset is.
	families := map[string]string{"auto": kernels.Features(), "": kernels.Features(), "generic": "generic"}
	if runtime.GOARCH == "amd64" {
		families["avx2"] = "avx2 fma f16c"
	}
	for f, features := range families {
		out, errOut, err := run(f, "preflight", "--model", model)
		if err != nil && f == "avx2" && strings.Contains(errOut, "no AVX2 kernels") {
			t.Logf("avx2: this CPU has none: %s", errOut)
			continue
		}
		if err != nil {
			t.Fatalf("%s: preflight: %v\n%s", f, err, errOut)
		}
		if !strings.Contains(out, "\nkernels: "+features+"\n") {
			t.Errorf("%s: preflight says %q, want kernels: %s", f, out, features)
		}
		got, errOut, err := gen(f)
		if err != nil {
			t.Fatalf("%s: %v\n%s", f, err, errOut)
		}
		if got != want {
			t.Errorf("%s kernels: %q, auto: %q", f, got, want)
		}
	}
	_, errOut, err = gen("avx512")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("unknown family: %v, want exit status 2", err)
	}
	if !strings.Contains(errOut, `BULKHEAD_KERNELS: kernels "avx512": unknown family; want auto, avx2 or generic`) {
		t.Errorf("unknown family: stderr %q", errOut)
	}
}
