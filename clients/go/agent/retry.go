package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how long a call is repeated. Which failures are repeated is fixed by
// what docs/api.md says is safe (see the package documentation, "Retries"); the policy only bounds it.
type RetryPolicy struct {
	// Attempts is the most attempts a call makes, the first included; 1 or less repeats nothing.
	Attempts int
	// Initial is the first backoff; each next one doubles, up to Max, with jitter.
	Initial, Max time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a longer one ends the call with the
	// error (its RetryAfter says when to try).
	MaxRetryAfter time.Duration
}

// DefaultRetryPolicy is the policy of a Client made without WithRetry: 4 attempts, backoff from 250ms up to
// 5s, a Retry-After of up to 30s waited for. A function, so that no program can change it for every other.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Attempts: 4, Initial: 250 * time.Millisecond, Max: 5 * time.Second, MaxRetryAfter: 30 * time.Second}
}

var errNoMoreAttempts = errors.New("no more attempts")

// backoff is the wait before attempt n+1, with jitter in [d/2, d].
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Initial
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// repeatable says whether an answered error may be repeated. rate_limited: nothing was read or written.
// unavailable (the agent's own body): every operation is safe to repeat (docs/api.md, "Repeating a call"),
// and an interrupted Start, Hold or Release is completed by the same call again. A 5xx that is not the
// agent's (a proxy's) may have reached the agent: repeated for reads only.
func repeatable(e *Error, ours, read bool) bool {
	switch e.Kind {
	case "rate_limited":
		return true
	case "unavailable":
		return ours || read
	}
	return false
}

// permanent says a connection failure will not go away by trying again: the certificate is not trusted.
func permanent(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &record)
}

// pause waits before attempt n+1, or says why not: no attempts left, a Retry-After too long or past the
// context's deadline, or the context ended (its error).
func (c *Client) pause(ctx context.Context, p RetryPolicy, n int, retryAfter time.Duration) error {
	if n >= p.Attempts {
		return errNoMoreAttempts
	}
	if retryAfter > p.MaxRetryAfter {
		return errNoMoreAttempts
	}
	d := max(p.backoff(n), retryAfter)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return errNoMoreAttempts
	}
	return c.sleep(ctx, d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
