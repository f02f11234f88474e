package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A CallOption changes one call: WithCallRetry, WithCallTimeout.
type CallOption func(*callConfig)

type callConfig struct {
	retry   RetryPolicy
	timeout time.Duration
}

// WithCallRetry bounds this call's repeats with p instead of the client's policy (WithRetry);
// RetryPolicy{} repeats nothing.
func WithCallRetry(p RetryPolicy) CallOption { return func(c *callConfig) { c.retry = p } }

// WithCallTimeout bounds each attempt of this call by d instead of the client's timeout (WithTimeout); d <= 0
// is ignored.
func WithCallTimeout(d time.Duration) CallOption {
	return func(c *callConfig) {
		if d > 0 {
			c.timeout = d
		}
	}
}

func (c *Client) callConfig(opts []CallOption) callConfig {
	cfg := callConfig{retry: c.retry, timeout: c.timeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return cfg
}

// limiter is a token bucket: qps tokens a second, at most burst at once; every attempt takes one.
type limiter struct {
	mu     sync.Mutex
	qps    float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
}

func newLimiter(qps float64, burst int) (*limiter, error) {
	if qps <= 0 || burst < 1 {
		return nil, fmt.Errorf("WithRateLimit(%g, %d): qps must be positive and burst at least 1", qps, burst)
	}
	return &limiter{qps: qps, burst: float64(burst), tokens: float64(burst), now: time.Now, sleep: sleep}, nil
}

var errLimiterWait = errors.New("the client's rate limit would wait past the context's deadline")

// wait takes a token, waiting for one when the bucket is empty; the context's error when it ends first.
func (l *limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.qps)
	}
	l.last = now
	l.tokens-- // reserved now, so that concurrent calls queue in order
	var d time.Duration
	if l.tokens < 0 {
		d = time.Duration(-l.tokens / l.qps * float64(time.Second))
	}
	l.mu.Unlock()
	if d == 0 {
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		l.cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("%w (%s): %w", errLimiterWait, d, context.DeadlineExceeded)
	}
	if err := l.sleep(ctx, d); err != nil {
		l.cancel()
		return err
	}
	return nil
}

// cancel gives back a token reserved by a wait that did not happen.
func (l *limiter) cancel() {
	l.mu.Lock()
	l.tokens = min(l.burst, l.tokens+1)
	l.mu.Unlock()
}
