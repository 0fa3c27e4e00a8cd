package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func spinWait() { time.Sleep(2 * time.Millisecond) }

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x < 88.7; x += 0.0137 {
		got := float64(expf(x))
		want := math.Exp(float64(x))
		if e := math.Abs(got-want) / want; e > worst {
			worst = e
		}
	}
	// About 2 ulp of float32.
	if worst > 2.5e-7 {
		t.Fatalf("expf relative error %g, want <= 2.5e-7", worst)
	}
	if expf(-200) != 0 || !math.IsInf(float64(expf(200)), 1) || expf(0) != 1 {
		t.Fatalf("expf edge values: exp(-200)=%g exp(200)=%g exp(0)=%g", expf(-200), expf(200), expf(0))
	}
}

func TestOpsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 5, 64, 768, 1001} {
		x, w := randFloats(rng, n), randFloats(rng, n)

		var ss, dot, mag float64
		for i := range x {
			ss += float64(x[i]) * float64(x[i])
			dot += float64(x[i]) * float64(w[i])
			mag += math.Abs(float64(x[i]) * float64(w[i]))
		}
		if got := float64(Dot(x, w)); math.Abs(got-dot) > 1e-6*mag {
			t.Fatalf("Dot len %d: %g, want %g", n, got, dot)
		}

		out := make([]float32, n)
		RMSNorm(out, x, w, 1e-5)
		scale := 1 / math.Sqrt(ss/float64(n)+1e-5)
		for i := range x {
			want := float64(x[i]) * scale * float64(w[i])
			if math.Abs(float64(out[i])-want) > 1e-5*math.Abs(want)+1e-30 {
				t.Fatalf("RMSNorm len %d [%d]: %g, want %g", n, i, out[i], want)
			}
		}

		a := append([]float32(nil), x...)
		SiLUMul(a, w)
		for i := range x {
			v := float64(x[i])
			want := v / (1 + math.Exp(-v)) * float64(w[i])
			if math.Abs(float64(a[i])-want) > 1e-5*math.Abs(want)+1e-30 {
				t.Fatalf("SiLUMul len %d [%d]: silu(%g)*%g = %g, want %g", n, i, x[i], w[i], a[i], want)
			}
		}

		s := append([]float32(nil), x...)
		Softmax(s)
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, float64(v))
		}
		var z float64
		for _, v := range x {
			z += math.Exp(float64(v) - m)
		}
		for i, v := range x {
			want := math.Exp(float64(v)-m) / z
			if math.Abs(float64(s[i])-want) > 1e-5*want+1e-12 {
				t.Fatalf("Softmax len %d [%d]: %g, want %g", n, i, s[i], want)
			}
		}

		y := append([]float32(nil), x...)
		axpy1(y, -0.5, w)
		Add(y, w)
		for i := range y {
			want := float64(x[i]) + 0.5*float64(w[i])
			if math.Abs(float64(y[i])-want) > 1e-6*(math.Abs(float64(x[i]))+math.Abs(float64(w[i]))) {
				t.Fatalf("Axpy+Add len %d [%d]: %g, want %g", n, i, y[i], want)
			}
		}
	}
}
