package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

// DefaultTimeout bounds one call (each attempt): Start may wait workloadTimeout for the Workload and
// Preflight watches for ten seconds or more. For Output it bounds the wait for the answer's headers only.
const DefaultTimeout = 120 * time.Second

// An Option configures a Client.
type Option func(*config) error

type config struct {
	caPEM     []byte
	caFile    string
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
// caBundle), read when the client is made. Without a CA option the system's roots are used.
func WithCAFile(path string) Option {
	return func(c *config) error { c.caFile = path; return nil }
}

// WithCA verifies the agent's certificate against the PEM bundle pem.
func WithCA(pem []byte) Option {
	return func(c *config) error { c.caPEM = slices.Clone(pem); return nil }
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

// WithRetry sets when calls are repeated (DefaultRetry); RetryPolicy{} never repeats one.
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

func (c *config) transport() (http.RoundTripper, error) {
	tlsConfig := c.tls
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	pem := c.caPEM
	if c.caFile != "" {
		raw, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA bundle: %w", err)
		}
		pem = append(slices.Clone(pem), raw...)
	}
	if pem != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("the CA bundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
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
	var rt http.RoundTripper = &http.Transport{
		Proxy:                 nil, // the agent is in the cluster; HTTPS_PROXY is not for it
		DialContext:           dial,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   10 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
		ExpectContinueTimeout: time.Second,
	}
	if c.wrap != nil {
		rt = c.wrap(rt)
	}
	return rt, nil
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
