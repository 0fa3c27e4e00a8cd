package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

func init() {
	register("convert", "write a GGUF file from a llama2.c checkpoint, or a random model for benchmarks", runConvert)
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("convert", stderr)
	checkpoint := fs.String("checkpoint", "", "llama2.c checkpoint to convert (default: the embedded stories260K)")
	tokPath := fs.String("tokenizer", "", "llama2.c tokenizer file for --checkpoint")
	random := fs.String("random", "", "write a random-weight model of this shape instead: "+convert.ShapeNames())
	seed := fs.Uint64("seed", 1, "seed for --random weights")
	typ := fs.String("type", "f32", "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q4_k_m or q5_k_m (llama.cpp's mixes of q4_k or q5_k with q6_k), q3_k_m (its mix of q3_k with q4_k, q5_k and q6_k); q2_k is llama.cpp's Q2_K mix (q2_k with q3_k, q4_k and q6_k), not q2_k throughout; K-quants need rows of a multiple of 256, other matrices fall back as in llama.cpp (q2_k and q3_k to q4_0, q4_k to q5_0, q5_k to q5_1, q6_k to q8_0; f16 if rows are not a multiple of 32)")
	out := fs.String("out", "", "output GGUF path (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if fi, err := os.Stat(*out); err == nil && fi.IsDir() {
		// Said now, not after a conversion that can take minutes.
		return usagef("--out %s is a directory; name the GGUF file to write", *out)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// A flag the chosen source ignores is a mistake to report, not to
	// drop: --tokenizer alone would otherwise quietly convert the
	// embedded model with the embedded tokenizer.
	switch {
	case *random != "" && *checkpoint != "":
		return usagef("--random and --checkpoint are exclusive")
	case *random != "" && set["tokenizer"]:
		return usagef("--tokenizer applies to --checkpoint; --random models use the embedded tokenizer")
	case *random == "" && set["seed"]:
		return usagef("--seed applies to --random")
	case *checkpoint == "" && set["tokenizer"]:
		return usagef("--tokenizer needs --checkpoint")
	case *checkpoint != "" && *tokPath == "":
		return usagef("--checkpoint needs --tokenizer")
	}
	for _, in := range []string{*checkpoint, *tokPath} {
		if sameFile(in, *out) {
			return usagef("--out %s is the input file %s; converting would replace it", *out, in)
		}
	}
	mixQ4KM, mixQ5KM := strings.EqualFold(*typ, "q4_k_m"), strings.EqualFold(*typ, "q5_k_m")
	mixQ3KM := strings.EqualFold(*typ, "q3_k_m")
	dt := tensor.Q4_K
	var err error
	if !mixQ4KM && !mixQ5KM && !mixQ3KM {
		if dt, err = tensor.ParseDType(*typ); err != nil {
			return usageError{err}
		}
		if !slices.Contains(convert.Types(), dt) {
			return usagef("cannot write %s weights (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, q3_k_m, q4_k_m, q5_k_m)", dt)
		}
	}
	var m *convert.Model
	switch {
	case *random != "":
		shape, ok := convert.Shapes[*random]
		if !ok {
			return usagef("unknown shape %q (known: %s)", *random, convert.ShapeNames())
		}
		// Streamed: the 1.1B shape is 4.4 GB of float32 weights, drawn
		// one tensor at a time as the file is written.
		if m, err = convert.RandomStream(shape, *seed); err != nil {
			return err
		}
	default:
		name, ckpt, tok := embedded.Name, embedded.Checkpoint, embedded.Tokenizer
		if *checkpoint != "" {
			if ckpt, err = os.ReadFile(*checkpoint); err != nil {
				return err
			}
			if tok, err = os.ReadFile(*tokPath); err != nil {
				return err
			}
			name = strings.TrimSuffix(filepath.Base(*checkpoint), filepath.Ext(*checkpoint))
		}
		c, err := llama2c.Parse(name, ckpt)
		if err != nil {
			return inFile(*checkpoint, err)
		}
		t, err := tokenizer.FromLlama2C(tok, c.Vocab)
		if err != nil {
			return inFile(*tokPath, err)
		}
		m = convert.FromLlama2C(name, c, t)
	}
	return writeOutput(*out, func(w io.Writer) error {
		switch {
		case mixQ4KM:
			return convert.WriteGGUFQ4KM(w, m)
		case mixQ5KM:
			return convert.WriteGGUFQ5KM(w, m)
		case mixQ3KM:
			return convert.WriteGGUFQ3KM(w, m)
		case dt == tensor.Q2_K:
			return convert.WriteGGUFQ2K(w, m)
		}
		return convert.WriteGGUF(w, m, dt)
	})
}

// inFile names the input file an error is about; "" is the embedded
// model, whose errors need no name.
func inFile(path string, err error) error {
	if path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// sameFile reports whether in and out name one existing file.
func sameFile(in, out string) bool {
	if in == "" {
		return false
	}
	a, err1 := os.Stat(in)
	b, err2 := os.Stat(out)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// writeOutput writes the GGUF file at path. An existing path that is not a
// regular file (/dev/null, /dev/stdout, a named pipe) is written to
// directly: renaming a temporary file over it, as writeFileAtomic does,
// would replace the device or pipe itself, and for root replace /dev/null
// with a multi-gigabyte file. Errors name path.
func writeOutput(path string, write func(io.Writer) error) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return writeFileAtomic(path, write)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, withoutPath(err))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, withoutPath(err))
	}
	return nil
}

// writeFileAtomic writes through a temporary file in the same directory and
// renames it into place, so a failed conversion never leaves a truncated
// model where a good one is expected. Its I/O errors name path, not the
// temporary file, which the user never asked for and which is gone by the
// time they read the message.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, withoutPath(err))
	}
	defer os.Remove(f.Name())
	ioErr := func(err error) error {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, withoutPath(err))
	}
	bw := &errWriter{w: bufio.NewWriterSize(f, 1<<20)}
	if err := write(bw); err != nil {
		if bw.err != nil {
			return ioErr(bw.err)
		}
		f.Close()
		return err
	}
	if err := bw.w.Flush(); err != nil {
		return ioErr(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return ioErr(err)
	}
	// Synced before the rename, so a crash cannot leave the new name on
	// a file whose data never reached the disk.
	if err := f.Sync(); err != nil {
		return ioErr(err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, withoutPath(err))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// withoutPath drops the temporary file's name from an I/O error: "write
// /models/.x.gguf.tmp123: no space left on device" becomes "no space left
// on device".
func withoutPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// errWriter remembers the first error of the writer under it, so that a
// failure the converter reports (wrapped as "gguf write: tensor ...") can
// still be told apart as the file's.
type errWriter struct {
	w   *bufio.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}
