package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds one call (each attempt): Start may wait workloadTimeout for the Workload and
// Preflight watches for ten seconds or more. For Output it bounds the wait for the answer's headers only.
const DefaultTimeout = 120 * time.Second

// An Option configures a Client.
type Option func(*config) error

// DefaultCARefresh is how often a CA bundle from a file or a CASource is read again (docs/certs.md: clients
// re-read it at least hourly, since the agent's CA rotates). It is also read again once after a certificate
// the current bundle does not verify.
const DefaultCARefresh = time.Hour

// A CASource returns the PEM bundle that verifies the agent (e.g. read from a ConfigMap or the webhook
// configurations' caBundle). It is called when the client is made, every WithCARefresh, and once after a
// certificate the current bundle does not verify.
type CASource func(ctx context.Context) ([]byte, error)

type config struct {
	caPEM     []byte
	caFile    string
	caSource  CASource
	caRefresh time.Duration
	proxy     func(*http.Request) (*url.URL, error)
	limiter   *limiter
	tls       *tls.Config
	token     TokenSource
	audience  string
	timeout   time.Duration
	dial      func(ctx context.Context, network, address string) (net.Conn, error)
	resolve   map[string]string
	retry     RetryPolicy
	wrap      func(http.RoundTripper) http.RoundTripper
	userAgent string
}

// A TokenSource returns the bearer token for one call. It is called for every attempt of every call.
type TokenSource func(ctx context.Context) (string, error)

// TokenFile reads the token from path at every call: a projected ServiceAccount token is rotated on disk
// by the kubelet, and a token read once would expire under a long-running supervisor.
func TokenFile(path string) TokenSource {
	return func(context.Context) (string, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		token := strings.TrimSpace(string(raw))
		if token == "" {
			return "", fmt.Errorf("the token file %s is empty", path)
		}
		return token, nil
	}
}

// WithTokenFile sends the token in path, read at every call (TokenFile).
func WithTokenFile(path string) Option { return WithTokenSource(TokenFile(path)) }

// WithToken sends a fixed token (tests, short-lived programs). Prefer WithTokenFile.
func WithToken(token string) Option {
	return WithTokenSource(func(context.Context) (string, error) { return token, nil })
}

// WithTokenSource sends the token src returns, asked at every call.
func WithTokenSource(src TokenSource) Option {
	return func(c *config) error { c.token = src; return nil }
}

// WithAudience names the audience the agent's tokenAudiences expects (e.g. "dispatch-agent"): before each
// call the token (a JWT, as Kubernetes issues) must list it in its "aud" claim, else the call fails with
// ErrUnauthenticated and nothing is sent. The token's signature is the API server's to check, not this
// client's; the point is to never hand the agent a token it must refuse, since failed tokens from one
// address are rate-limited, and never to send a token meant for another audience to the agent.
func WithAudience(audience string) Option {
	return func(c *config) error { c.audience = audience; return nil }
}

// WithCAFile verifies the agent's certificate against the PEM bundle in path (the webhook configurations'
// caBundle, mounted from a ConfigMap), read when the client is made, again every DefaultCARefresh
// (WithCARefresh), and again once after a certificate it does not verify, so a rotated CA is picked up
// without a restart. Without a CA option the system's roots are used.
func WithCAFile(path string) Option {
	return func(c *config) error { c.caFile = path; return nil }
}

// WithCA verifies the agent's certificate against the PEM bundle pem, fixed for the client's life: prefer
// WithCAFile or WithCASource for a long-running program.
func WithCA(pem []byte) Option {
	return func(c *config) error { c.caPEM = slices.Clone(pem); return nil }
}

// WithCASource verifies the agent's certificate against the bundle src returns, asked as WithCAFile reads
// its file.
func WithCASource(src CASource) Option {
	return func(c *config) error { c.caSource = src; return nil }
}

// WithCARefresh sets how often the CA bundle of WithCAFile or WithCASource is read again (DefaultCARefresh).
func WithCARefresh(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("WithCARefresh: the interval must be positive")
		}
		c.caRefresh = d
		return nil
	}
}

// WithProxy chooses the proxy of each request (http.ProxyFromEnvironment by default: HTTPS_PROXY and
// NO_PROXY; an in-cluster caller behind a proxy lists the cluster's domain, e.g. .svc, in NO_PROXY).
// WithProxy(nil) connects directly.
func WithProxy(proxy func(*http.Request) (*url.URL, error)) Option {
	return func(c *config) error { c.proxy = proxy; return nil }
}

// WithRateLimit limits the client to qps attempts a second, burst at once (a token bucket, as client-go's
// QPS and Burst); a call waits for its turn, or ends with its context. Repeats count too. Without it nothing
// is limited here (the agent answers rate_limited for what it limits).
func WithRateLimit(qps float64, burst int) Option {
	return func(c *config) error {
		l, err := newLimiter(qps, burst)
		if err != nil {
			return err
		}
		c.limiter = l
		return nil
	}
}

// WithTLSConfig uses cfg (cloned) for TLS; WithCA and WithCAFile still set its RootCAs.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) error { c.tls = cfg.Clone(); return nil }
}

// WithTimeout bounds each attempt of a call (DefaultTimeout); for Output, the wait for its headers.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("WithTimeout: the timeout must be positive")
		}
		c.timeout = d
		return nil
	}
}

// WithResolve connects to host at address (an IP), as curl's --resolve and the CLI's --resolve: e.g. the
// Service's name at its ClusterIP from a machine without the cluster's DNS. The certificate is still
// checked against host.
func WithResolve(host, address string) Option {
	return func(c *config) error {
		if net.ParseIP(address) == nil {
			return fmt.Errorf("WithResolve(%q, %q): the address must be an IP", host, address)
		}
		if c.resolve == nil {
			c.resolve = map[string]string{}
		}
		c.resolve[host] = address
		return nil
	}
}

// WithDialContext dials every connection with dial (a proxy, a test's listener). The certificate is still
// checked against the server URL's host.
func WithDialContext(dial func(ctx context.Context, network, address string) (net.Conn, error)) Option {
	return func(c *config) error { c.dial = dial; return nil }
}

// WithRetry bounds how calls are repeated (DefaultRetryPolicy); RetryPolicy{} never repeats one. One call's
// WithCallRetry overrides it.
func WithRetry(p RetryPolicy) Option {
	return func(c *config) error { c.retry = p; return nil }
}

// WithTransportWrapper wraps the client's transport (after TLS and dialling are set): logging, metrics, or
// a test's validation of every exchange.
func WithTransportWrapper(wrap func(http.RoundTripper) http.RoundTripper) Option {
	return func(c *config) error { c.wrap = wrap; return nil }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *config) error { c.userAgent = ua; return nil }
}

func (c *config) transport() (http.RoundTripper, *caTransport, error) {
	base := c.tls
	if base == nil {
		base = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := c.dial
	if dial == nil {
		dial = dialer.DialContext
	}
	if len(c.resolve) > 0 {
		resolve, next := c.resolve, dial
		dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(address)
			if err == nil {
				if ip, ok := resolve[host]; ok {
					address = net.JoinHostPort(ip, port)
				}
			}
			return next(ctx, network, address)
		}
	}
	build := func(pool *x509.CertPool) *http.Transport {
		tlsConfig := base.Clone()
		if pool != nil {
			tlsConfig.RootCAs = pool
		}
		return &http.Transport{
			Proxy:                 c.proxy,
			DialContext:           dial,
			TLSClientConfig:       tlsConfig,
			TLSHandshakeTimeout:   10 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   8,
			ExpectContinueTimeout: time.Second,
		}
	}
	var ca *caTransport
	var rt http.RoundTripper
	switch {
	case c.caFile != "" || c.caSource != nil:
		src := c.caSource
		if c.caFile != "" {
			path, other := c.caFile, c.caSource
			src = func(ctx context.Context) ([]byte, error) {
				raw, err := os.ReadFile(path)
				if err != nil {
					return nil, fmt.Errorf("reading the CA bundle: %w", err)
				}
				if other != nil {
					more, err := other(ctx)
					if err != nil {
						return nil, err
					}
					raw = append(raw, more...)
				}
				return raw, nil
			}
		}
		ca = &caTransport{fixed: c.caPEM, src: src, every: c.caRefresh, build: build, now: time.Now}
		if err := ca.refresh(true); err != nil {
			return nil, nil, err
		}
		rt = ca
	case c.caPEM != nil:
		pool, err := certPool(c.caPEM)
		if err != nil {
			return nil, nil, err
		}
		rt = build(pool)
	default:
		rt = build(nil)
	}
	if c.wrap != nil {
		rt = c.wrap(rt)
	}
	return rt, ca, nil
}

func certPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("the CA bundle holds no PEM certificate")
	}
	return pool, nil
}

// caTransport is the transport of a CA bundle that is read again: every `every`, and when asked (after a
// certificate failure). A changed bundle makes a new transport; the old one's idle connections are closed,
// while its calls in flight finish.
type caTransport struct {
	fixed []byte // WithCA's bundle, added to the source's
	src   CASource
	every time.Duration
	build func(*x509.CertPool) *http.Transport
	now   func() time.Time

	mu   sync.Mutex
	pem  []byte
	read time.Time
	cur  *http.Transport
}

func (t *caTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	stale := t.now().Sub(t.read) >= t.every
	t.mu.Unlock()
	if stale {
		_ = t.refresh(false) // an unreadable bundle keeps the last one, until the next try
	}
	t.mu.Lock()
	cur := t.cur
	t.mu.Unlock()
	return cur.RoundTrip(req)
}

// refresh reads the bundle again; force reads it whatever its age.
func (t *caTransport) refresh(force bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !force && t.now().Sub(t.read) < t.every {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := t.src(ctx)
	t.read = t.now() // tried: a failing source is not asked at every call
	if err != nil {
		return err
	}
	raw = append(slices.Clone(t.fixed), raw...)
	if t.cur != nil && bytes.Equal(raw, t.pem) {
		return nil
	}
	pool, err := certPool(raw)
	if err != nil {
		return err
	}
	old := t.cur
	t.pem, t.cur = raw, t.build(pool)
	if old != nil {
		old.CloseIdleConnections()
	}
	return nil
}

// CloseIdleConnections closes the current transport's idle connections.
func (t *caTransport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil {
		t.cur.CloseIdleConnections()
	}
}

// audiences reads the "aud" claim of a JWT without verifying it (the API server verifies it).
func audiences(token string) ([]string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("the token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("the token's payload is not base64url")
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, errors.New("the token's payload is not JSON")
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(claims.Aud, &many); err != nil {
		return nil, errors.New("the token has no aud claim")
	}
	return many, nil
}
