package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

func TestCancellingDuringTheBackoffIsTheContextsError(t *testing.T) {
	for kind, status := range map[string]int{"unavailable": 503, "rate_limited": 429} {
		f := newFake(t)
		f.handle("/v1/status", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			answer(w, status, apiError(kind, "not now"))
		})
		c, _ := client(t, f, clientOpts{})
		ctx, cancel := context.WithCancel(context.Background())
		c.sleep = func(context.Context, time.Duration) error { cancel(); return ctx.Err() } // cancelled while waiting
		_, err := c.Status(ctx, ref)
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRateLimited) {
			t.Errorf("%s: %v, want context.Canceled only", kind, err)
		}
		// A cause the caller gave is kept, and the error still matches context.Canceled.
		ctx, cancelCause := context.WithCancelCause(context.Background())
		why := errors.New("shutting down")
		c.sleep = func(context.Context, time.Duration) error { cancelCause(why); return ctx.Err() }
		if _, err := c.Status(ctx, ref); !errors.Is(err, context.Canceled) || !errors.Is(err, why) {
			t.Errorf("%s: %v, want context.Canceled with its cause", kind, err)
		}
	}
}

func TestADeadlineDuringTheBackoffIsTheContextsError(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/status", failing(100, nil))
	c, _ := client(t, f, clientOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c.sleep = func(context.Context, time.Duration) error { return context.DeadlineExceeded }
	ctx2, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second)) // already past when the pause ends
	defer cancel2()
	if _, err := c.Status(ctx2, ref); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

func TestACallsOptionsOverrideTheClients(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/status", failing(100, nil))
	c, _ := client(t, f, clientOpts{})
	if _, err := c.Status(context.Background(), ref, WithCallRetry(RetryPolicy{})); !errors.Is(err, ErrUnavailable) || f.count("/v1/status") != 1 {
		t.Fatalf("%v after %d", err, f.count("/v1/status"))
	}
	if _, err := c.Status(context.Background(), ref); f.count("/v1/status") != 1+DefaultRetryPolicy().Attempts {
		t.Fatalf("the client's own policy again: %v after %d", err, f.count("/v1/status"))
	}
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	f.handle("/v1/open", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-slow:
		case <-r.Context().Done():
		}
	})
	began := time.Now()
	_, err := c.Open(context.Background(), ref, WithCallTimeout(100*time.Millisecond))
	if !errors.Is(err, ErrOutcomeUnknown) || time.Since(began) > 10*time.Second {
		t.Fatalf("%v after %s", err, time.Since(began))
	}
}

func TestTheDefaultRetryPolicyCannotBeChangedForOthers(t *testing.T) {
	p := DefaultRetryPolicy()
	p.Attempts = 100
	if DefaultRetryPolicy().Attempts == 100 {
		t.Fatal("DefaultRetryPolicy is shared")
	}
}

func TestTheRateLimitIsATokenBucket(t *testing.T) {
	l, err := newLimiter(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	var slept []time.Duration
	l.now = func() time.Time { return now }
	l.sleep = func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return ctx.Err() }
	ctx := context.Background()
	for range 3 {
		if err := l.wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(slept, []time.Duration{500 * time.Millisecond}) {
		t.Fatalf("the burst, then one at 2 a second: %v", slept)
	}
	now = now.Add(10 * time.Second) // refilled, to the burst only
	slept = nil
	for range 3 {
		_ = l.wait(ctx)
	}
	if len(slept) != 1 {
		t.Fatalf("%v", slept)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.wait(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if _, err := newLimiter(0, 1); err == nil {
		t.Fatal("qps 0 must be refused")
	}
}

func TestTheRateLimitHoldsBackEveryAttempt(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	c, _ := client(t, f, clientOpts{opts: []Option{WithRateLimit(1000, 1)}})
	var slept atomic.Int32
	now := time.Now()
	c.limit.now = func() time.Time { return now } // no refill between the calls, however slow the machine
	c.limit.sleep = func(ctx context.Context, d time.Duration) error { slept.Add(1); return nil }
	for range 3 {
		if _, err := c.Stop(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	if slept.Load() != 2 {
		t.Fatalf("three calls in a row with a burst of one waited %d times, not 2", slept.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	c.limit.sleep = sleep
	c.limit.qps = 0.001 // the next token in 1000s: past the deadline
	if _, err := c.Stop(ctx, ref); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

func TestTheProxyIsTheEnvironmentsUnlessChosen(t *testing.T) {
	c, err := New("https://agent.example:8443", WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := c.http.Transport.(*http.Transport).Proxy
	if reflect.ValueOf(proxy).Pointer() != reflect.ValueOf(http.ProxyFromEnvironment).Pointer() {
		t.Fatal("the default transport does not honour HTTPS_PROXY")
	}
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	var asked atomic.Int32
	c2, _ := client(t, f, clientOpts{opts: []Option{WithProxy(func(*http.Request) (*url.URL, error) { asked.Add(1); return nil, nil })}})
	if _, err := c2.Stop(context.Background(), ref); err != nil || asked.Load() == 0 {
		t.Fatalf("%v, proxy asked %d time(s)", err, asked.Load())
	}
}

// otherCA is a CA's certificate that signed nothing the tests serve.
func otherCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestACertificateFailureReReadsTheCAOnce(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	agentCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, otherCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	dial := WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	c, err := New(f.URL, WithToken("t"), WithCAFile(file), dial)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The bundle has not the agent's CA yet: refused, re-read once (still not there), nothing sent.
	if _, err := c.Stop(context.Background(), ref); !errors.Is(err, ErrUnavailable) || dials.Load() != 2 || f.count("/v1/stop") != 0 {
		t.Fatalf("%v after %d dial(s)", err, dials.Load())
	}
	// The CA rotated in (the ConfigMap updated): the next certificate failure re-reads it, and the call succeeds.
	if err := os.WriteFile(file, append(otherCA(t), agentCA...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(context.Background(), ref); err != nil || f.count("/v1/stop") != 1 {
		t.Fatalf("%v", err)
	}
}

func TestTheCAIsReadAgainEveryRefresh(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	agentCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	var reads atomic.Int32
	src := WithCASource(func(context.Context) ([]byte, error) { reads.Add(1); return agentCA, nil })
	c, err := New(f.URL, WithToken("t"), src, WithCARefresh(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	c.ca.now = func() time.Time { return now }
	for range 3 {
		if _, err := c.Stop(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	if reads.Load() != 1 {
		t.Fatalf("read %d times within the hour", reads.Load())
	}
	now = now.Add(time.Hour)
	if _, err := c.Stop(context.Background(), ref); err != nil || reads.Load() != 2 {
		t.Fatalf("%v; read %d times after an hour", err, reads.Load())
	}
	if _, err := New(f.URL, WithToken("t"), WithCARefresh(0)); err == nil {
		t.Fatal("a refresh of 0 must be refused")
	}
}
