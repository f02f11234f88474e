package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func TestTheTokenFileIsReadAtEveryCall(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	rotate := func(token string) { // as the kubelet does: a new file renamed over the old one
		tmp := filepath.Join(dir, ".new")
		if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	rotate("first")
	c, _ := client(t, f, clientOpts{opts: []Option{WithTokenFile(path)}})
	for _, token := range []string{"first", "second", "third"} {
		rotate(token)
		if _, err := c.Stop(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	// WithToken("t0k3n") of the helper is overridden by the later WithTokenFile.
	if got := f.tokens(); !slices.Equal(got, []string{"Bearer first", "Bearer second", "Bearer third"}) {
		t.Fatalf("the agent saw %q", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := c.Stop(context.Background(), ref)
	if !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, os.ErrNotExist) || f.count("/v1/stop") != 3 {
		t.Fatalf("a missing token file: %v (nothing may be sent)", err)
	}
}

func jwt(claims map[string]any) string {
	enc := func(v any) string { raw, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(raw) }
	return enc(map[string]string{"alg": "RS256"}) + "." + enc(claims) + ".c2lnbmF0dXJl"
}

func TestATokenForAnotherAudienceIsNeverSent(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{jwt(map[string]any{"aud": []string{"dispatch-agent"}}), true},
		{jwt(map[string]any{"aud": "dispatch-agent"}), true},
		{jwt(map[string]any{"aud": []string{"https://kubernetes.default.svc"}}), false},
		{jwt(map[string]any{"sub": "no audience"}), false},
		{"an-opaque-token", false},
	} {
		before := f.count("/v1/stop")
		c, _ := client(t, f, clientOpts{opts: []Option{WithToken(tc.token), WithAudience("dispatch-agent")}})
		_, err := c.Stop(context.Background(), ref)
		sent := f.count("/v1/stop") - before
		if tc.ok && (err != nil || sent != 1) {
			t.Errorf("%s: %v, sent %d", tc.token, err, sent)
		}
		if !tc.ok && (!errors.Is(err, ErrUnauthenticated) || sent != 0 || !strings.Contains(err.Error(), "nothing was sent")) {
			t.Errorf("%s: %v, sent %d: want ErrUnauthenticated and nothing sent", tc.token, err, sent)
		}
	}
}

func TestTheAgentIsVerifiedAgainstTheCAGivenAsBytesOrFile(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]Option{"bytes": WithCA(ca), "file": WithCAFile(file)} {
		c, err := New(f.URL, WithToken("t"), opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Stop(context.Background(), ref); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Without the CA: refused at the handshake, nothing sent, and not repeated (it would fail the same way).
	var dials atomic.Int32
	c, err := New(f.URL, WithToken("t"), WithDialContext(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stop(context.Background(), ref)
	if !errors.Is(err, ErrUnavailable) || !permanent(err) || dials.Load() != 1 || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("an untrusted agent: %v after %d dial(s)", err, dials.Load())
	}
	if _, err := New(f.URL, WithToken("t"), WithCA([]byte("not a certificate"))); err == nil {
		t.Fatal("a CA bundle without a certificate must be refused")
	}
}

func TestResolveConnectsToTheAddressAndChecksTheName(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, outcome) })
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.URL, "https://"))
	// httptest's certificate names example.com, which resolves nowhere near this server.
	c2, err := New("https://example.com:"+port, WithToken("t"), WithResolve("example.com", "127.0.0.1"),
		WithTLSConfig(f.Client().Transport.(*http.Transport).TLSClientConfig))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Stop(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	// The name is still checked: a name the certificate does not carry is refused.
	c3, _ := New("https://agent.invalid:"+port, WithToken("t"), WithResolve("agent.invalid", "127.0.0.1"),
		WithTLSConfig(f.Client().Transport.(*http.Transport).TLSClientConfig))
	if _, err := c3.Stop(context.Background(), ref); !errors.Is(err, ErrUnavailable) || !permanent(err) {
		t.Fatalf("a certificate without the name: %v", err)
	}
	if _, err := New(f.URL, WithToken("t"), WithResolve("agent", "not-an-ip")); err == nil {
		t.Fatal("an address that is not an IP must be refused, as the CLI's --resolve")
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts []Option
	}{
		{"http://agent:8443", []Option{WithToken("t")}},
		{"agent:8443", []Option{WithToken("t")}},
		{"https://agent:8443", nil},
	} {
		if _, err := New(tc.url, tc.opts...); err == nil {
			t.Errorf("New(%q) accepted", tc.url)
		}
	}
}
