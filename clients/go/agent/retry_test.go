package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// cutOff reads the request, then closes the connection without an answer.
func cutOff(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// failing answers unavailable n times, then OK.
func failing(n int, ok any) http.HandlerFunc {
	var seen atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) {
		if int(seen.Add(1)) <= n {
			answer(w, 503, apiError("unavailable", "cannot reach the API server"))
			return
		}
		answer(w, 200, ok)
	}
}

var started = map[string]any{"namespace": "team-a", "name": ref.Name, "uid": ref.UID}

func TestUnavailableIsRepeatedForEveryOperationWithBackoff(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/start", failing(2, started))
	c, w := client(t, f, clientOpts{})
	got, err := c.Start(context.Background(), StartRequest{JobID: "01JDQ7Z9V3K8M2N4P6R8T0W2Y4", N: 3, Namespace: "team-a",
		Runtime: RuntimeRef{Name: "dispatch-torch"}, Image: "registry.example/train:1", Command: []string{"python"}})
	if err != nil || got.UID != ref.UID {
		t.Fatalf("%v %v", got, err)
	}
	if f.count("/v1/start") != 3 || len(w.d) != 2 ||
		w.d[0] < DefaultRetryPolicy().Initial/2 || w.d[0] > DefaultRetryPolicy().Initial || w.d[1] < DefaultRetryPolicy().Initial || w.d[1] > 2*DefaultRetryPolicy().Initial {
		t.Fatalf("%d calls, waits %v", f.count("/v1/start"), w.d)
	}
}

func TestTheAttemptsAreBounded(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/status", failing(100, nil))
	c, w := client(t, f, clientOpts{})
	if _, err := c.Status(context.Background(), ref); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if f.count("/v1/status") != DefaultRetryPolicy().Attempts || len(w.d) != DefaultRetryPolicy().Attempts-1 {
		t.Fatalf("%d calls, waits %v", f.count("/v1/status"), w.d)
	}
}

func TestWhatMustNotBeRepeatedIsNot(t *testing.T) {
	for _, kind := range []string{"observe_only", "conflict", "rejected", "invalid", "forbidden", "unauthenticated", "internal", "not_found"} {
		f := newFake(t)
		status := map[string]int{"observe_only": 503, "conflict": 409, "rejected": 409, "invalid": 400, "forbidden": 403,
			"unauthenticated": 401, "internal": 500, "not_found": 404}[kind]
		f.handle("/v1/open", func(w http.ResponseWriter, r *http.Request) { answer(w, status, apiError(kind, "no")) })
		c, _ := client(t, f, clientOpts{})
		if _, err := c.Open(context.Background(), ref); !errors.Is(err, kinds[kind]) || f.count("/v1/open") != 1 {
			t.Errorf("%s: %v after %d call(s)", kind, err, f.count("/v1/open"))
		}
	}
}

func TestRateLimitedWaitsTheAgentsRetryAfter(t *testing.T) {
	f := newFake(t)
	var seen atomic.Int32
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 1 {
			w.Header().Set("Retry-After", "3")
			answer(w, 429, apiError("rate_limited", "too many failed tokens from 127.0.0.1: retry in 3s"))
			return
		}
		answer(w, 200, outcome)
	})
	c, w := client(t, f, clientOpts{})
	if _, err := c.Stop(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if len(w.d) != 1 || w.d[0] != 3*time.Second {
		t.Fatalf("waits %v, want the agent's 3s", w.d)
	}
	// Longer than the policy waits for: the error, with when to try.
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		answer(w, 429, apiError("rate_limited", "later"))
	})
	_, err := c.Stop(context.Background(), ref)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrRateLimited) || e.RetryAfter != time.Hour || len(w.d) != 1 {
		t.Fatalf("%v, waits %v", err, w.d)
	}
}

func TestAProxysFailureIsRepeatedForReadsOnly(t *testing.T) {
	f := newFake(t)
	bad := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }
	f.handle("/v1/status", bad)
	f.handle("/v1/release", bad)
	c, _ := client(t, f, clientOpts{unchecked: true})
	if _, err := c.Status(context.Background(), ref); !errors.Is(err, ErrUnavailable) || f.count("/v1/status") != DefaultRetryPolicy().Attempts {
		t.Errorf("status: %v after %d", err, f.count("/v1/status"))
	}
	if _, err := c.Release(context.Background(), ref); !errors.Is(err, ErrUnavailable) || f.count("/v1/release") != 1 {
		t.Errorf("release: %v after %d", err, f.count("/v1/release"))
	}
}

func TestACutOffWriteIsOutcomeUnknownAndNotRepeated(t *testing.T) {
	f := newFake(t)
	for _, path := range []string{"/v1/start", "/v1/open", "/v1/hold", "/v1/release", "/v1/stop", "/v1/preflight"} {
		f.handle(path, cutOff)
	}
	c, _ := client(t, f, clientOpts{})
	ctx := context.Background()
	calls := map[string]func() error{
		"/v1/start": func() error {
			_, err := c.Start(ctx, StartRequest{JobID: "01JDQ7Z9V3K8M2N4P6R8T0W2Y4", Namespace: "team-a", Runtime: RuntimeRef{Name: "r"}, Image: "i", Command: []string{"c"}})
			return err
		},
		"/v1/open": func() error { _, err := c.Open(ctx, ref); return err },
		"/v1/hold": func() error {
			_, err := c.Hold(ctx, ref, HoldRequest{Who: "ops", Reason: "drain"})
			return err
		},
		"/v1/release": func() error { _, err := c.Release(ctx, ref); return err },
		"/v1/stop":    func() error { _, err := c.Stop(ctx, ref); return err },
		"/v1/preflight": func() error {
			_, err := c.Preflight(ctx, PreflightRequest{Namespace: "team-a", Runtime: RuntimeRef{Name: "r"}})
			return err
		},
	}
	for path, call := range calls {
		err := call()
		var cut *CutOffError
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &cut) || errors.Is(err, ErrUnavailable) || f.count(path) != 1 {
			t.Errorf("%s: %v after %d call(s): want ErrOutcomeUnknown once", path, err, f.count(path))
		}
	}
}

func TestACutOffReadIsRepeated(t *testing.T) {
	f := newFake(t)
	var seen atomic.Int32
	f.handle("/v1/list", func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 1 {
			cutOff(w, r)
			return
		}
		answer(w, 200, map[string]any{"items": []any{}})
	})
	f.handle("/v1/status", cutOff)
	c, _ := client(t, f, clientOpts{})
	if _, err := c.ListAll(context.Background(), ListRequest{Namespace: "team-a"}); err != nil || f.count("/v1/list") != 2 {
		t.Fatalf("%v after %d", err, f.count("/v1/list"))
	}
	if _, err := c.Status(context.Background(), ref); !errors.Is(err, ErrOutcomeUnknown) || f.count("/v1/status") != DefaultRetryPolicy().Attempts {
		t.Fatalf("%v after %d", err, f.count("/v1/status"))
	}
}

func TestATimeoutIsACutOff(t *testing.T) {
	f := newFake(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.handle("/v1/open", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, _ := client(t, f, clientOpts{opts: []Option{WithTimeout(200 * time.Millisecond)}})
	_, err := c.Open(context.Background(), ref)
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) || f.count("/v1/open") != 1 {
		t.Fatalf("%v after %d", err, f.count("/v1/open"))
	}
	// The caller's own context: the same, with its cause.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = c.Open(ctx, ref)
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	// A context that ended before anything was sent: only that.
	_, err = c.Open(ctx, ref)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("%v", err)
	}
}

func TestAConnectionThatFailsBeforeSendingIsRepeatedForWritesToo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var dials atomic.Int32
	c, err := New("https://"+addr, WithToken("t"), WithDialContext(func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}))
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	c.sleep = w.sleep
	_, err = c.Start(context.Background(), StartRequest{})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) || int(dials.Load()) != DefaultRetryPolicy().Attempts ||
		!strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("%v after %d dial(s)", err, dials.Load())
	}
}

func TestNoRetryPolicyRepeatsNothing(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/status", failing(1, nil))
	c, _ := client(t, f, clientOpts{opts: []Option{WithRetry(RetryPolicy{})}})
	if _, err := c.Status(context.Background(), ref); !errors.Is(err, ErrUnavailable) || f.count("/v1/status") != 1 {
		t.Fatalf("%v after %d", err, f.count("/v1/status"))
	}
}

func TestBackoffDoublesUpToItsBound(t *testing.T) {
	p := RetryPolicy{Attempts: 10, Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond}
	for n, hi := range map[int]time.Duration{1: 100, 2: 200, 3: 400, 4: 400, 9: 400} {
		hi *= time.Millisecond
		for range 50 {
			if d := p.backoff(n); d < hi/2 || d > hi {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, hi/2, hi)
			}
		}
	}
}
