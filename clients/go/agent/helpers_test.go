package agent

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/internal/validate"
)

// document is the committed OpenAPI document, the one the agent serves (checked by the drift test).
func document(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// fake is an agent for the unit tests: TLS on loopback, answers from handlers per path. Its answers are
// checked against the document like the real agent's (the client's validating transport).
type fake struct {
	*httptest.Server
	mu    sync.Mutex
	hits  map[string]int
	auth  []string
	route map[string]http.HandlerFunc
}

func newFake(t *testing.T) *fake {
	f := &fake{hits: map[string]int{}, route: map[string]http.HandlerFunc{}}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.URL.Path]++
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		h := f.route[r.URL.Path]
		f.mu.Unlock()
		if h == nil {
			answer(w, 404, map[string]any{"error": "not_found", "message": "no such endpoint: " + r.Method + " " + r.URL.Path})
			return
		}
		h(w, r)
	}))
	f.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the tests make fail on purpose
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

func (f *fake) handle(path string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.route[path] = h
}

func (f *fake) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

func (f *fake) tokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...)
}

func answer(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func apiError(kind, message string) map[string]any {
	return map[string]any{"error": kind, "message": message}
}

// waits records the client's pauses instead of sleeping.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return ctx.Err()
}

type clientOpts struct {
	unchecked bool // answers that are not the API's (a proxy's page): not validated
	opts      []Option
}

// client is a Client of f, its exchanges validated against the document, its pauses recorded in the
// returned waits.
func client(t *testing.T, f *fake, o clientOpts) (*Client, *waits) {
	t.Helper()
	var checker *validate.Transport
	opts := []Option{WithToken("t0k3n"), WithTLSConfig(f.Client().Transport.(*http.Transport).TLSClientConfig)}
	if !o.unchecked {
		opts = append(opts, WithTransportWrapper(func(base http.RoundTripper) http.RoundTripper {
			var err error
			if checker, err = validate.New(document(t), base); err != nil {
				t.Fatal(err)
			}
			return checker
		}))
	}
	c, err := New(f.URL, append(opts, o.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	c.sleep = w.sleep
	t.Cleanup(func() {
		c.Close()
		if checker != nil {
			if p := checker.Problems(); len(p) > 0 {
				t.Errorf("exchanges that do not conform to the document:\n%s", strings.Join(p, "\n"))
			}
		}
	})
	return c, w
}

var ref = ObjectRef{Namespace: "team-a", Name: "dj-01jdq7z9v3k8m2n4p6r8t0w2y4-s3", UID: "6ddc797c-27b2-4cab-9737-6b024b5e9f51"}

var outcome = map[string]any{"outcome": "stopping", "a": nil}
