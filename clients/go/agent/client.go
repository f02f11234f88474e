package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/internal/wire"
)

// maxAnswer bounds a JSON answer read into memory (a List page of 500 items is far smaller).
const maxAnswer = 32 << 20

// Client calls one agent. It is safe for concurrent use.
type Client struct {
	server  string
	raw     *wire.Client
	http    *http.Client
	token   TokenSource
	aud     string
	ua      string
	timeout time.Duration
	retry   RetryPolicy
	sleep   func(context.Context, time.Duration) error
}

// New makes a client of the agent at server (https://host:port). A token option is required.
func New(server string, opts ...Option) (*Client, error) {
	cfg := config{timeout: DefaultTimeout, retry: DefaultRetry}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("the agent's URL must be https://host[:port], not %q: it serves HTTPS only", server)
	}
	if cfg.token == nil {
		return nil, errors.New("no token: use WithTokenFile (or WithToken, WithTokenSource)")
	}
	rt, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{
		Transport: rt,
		// The agent never redirects; a redirect would carry the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	server = strings.TrimRight(server, "/")
	raw, err := wire.NewClient(server, wire.WithHTTPClient(hc))
	if err != nil {
		return nil, err
	}
	return &Client{server: server, raw: raw, http: hc, token: cfg.token, aud: cfg.audience, ua: cfg.userAgent,
		timeout: cfg.timeout, retry: cfg.retry, sleep: sleep}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Ref is the reference Start's answer names, for Open, Status and the rest.
func Ref(s *StartResponse) ObjectRef {
	return ObjectRef{Namespace: s.Namespace, Name: s.Name, UID: s.UID}
}

// Preflight proves the gates of the request's mode and answers the capabilities. A failing Preflight answers
// (Capabilities.ObserveOnly true, with the reason); it is not an error.
func (c *Client) Preflight(ctx context.Context, req PreflightRequest) (*Capabilities, error) {
	return decode[Capabilities](c.call(ctx, "preflight", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Preflight(ctx, req, e)
	}))
}

// Capabilities is the report of the last Preflight (of the mode that ran last), without probing.
func (c *Client) Capabilities(ctx context.Context) (*Capabilities, error) {
	return decode[Capabilities](c.call(ctx, "capabilities", true, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Capabilities(ctx, e)
	}))
}

// Start creates the TrainJob, closed. Record the answer's name and uid before anything else.
func (c *Client) Start(ctx context.Context, req StartRequest) (*StartResponse, error) {
	return decode[StartResponse](c.call(ctx, "start", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Start(ctx, req, e)
	}))
}

// Open lets the TrainJob past its start gate.
func (c *Client) Open(ctx context.Context, ref ObjectRef) (*OpenResponse, error) {
	return decode[OpenResponse](c.call(ctx, "open", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Open(ctx, ref, e)
	}))
}

// Hold suspends the TrainJob (plain mode) or deactivates its Workload (Kueue mode), recording who and why.
func (c *Client) Hold(ctx context.Context, req HoldRequest) (*OutcomeResponse, error) {
	return decode[OutcomeResponse](c.call(ctx, "hold", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Hold(ctx, req, e)
	}))
}

// Release lifts dispatch's hold.
func (c *Client) Release(ctx context.Context, ref ObjectRef) (*OutcomeResponse, error) {
	return decode[OutcomeResponse](c.call(ctx, "release", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Release(ctx, ref, e)
	}))
}

// Stop deletes the TrainJob (this uid) in the foreground. Gone already is success.
func (c *Client) Stop(ctx context.Context, ref ObjectRef) (*OutcomeResponse, error) {
	return decode[OutcomeResponse](c.call(ctx, "stop", false, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Stop(ctx, ref, e)
	}))
}

// Status is what the cluster shows of the TrainJob. A TrainJob that is gone (or replaced) is ErrNotFound,
// with the orphans it left in the *Error.
func (c *Client) Status(ctx context.Context, ref ObjectRef) (*StatusResponse, error) {
	return decode[StatusResponse](c.call(ctx, "status", true, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Status(ctx, ref, e)
	}))
}

// List yields dispatch's TrainJobs in req.Namespace page by page, passing each page's continue token back;
// it stops after the last page, or after yielding an error. req.Continue, when set, is the first page's.
func (c *Client) List(ctx context.Context, req ListRequest) iter.Seq2[*ListResponse, error] {
	return func(yield func(*ListResponse, error) bool) {
		for {
			page, err := decode[ListResponse](c.call(ctx, "list", true, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
				return c.raw.List(ctx, req, e)
			}))
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.Continue == nil || *page.Continue == "" {
				return
			}
			req.Continue = page.Continue
		}
	}
}

// ListAll is every page of List, its items concatenated.
func (c *Client) ListAll(ctx context.Context, req ListRequest) ([]ListItem, error) {
	var items []ListItem
	for page, err := range c.List(ctx, req) {
		if err != nil {
			return nil, err
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// Output streams rank 0's log as the agent sends it, never buffered whole: read it, then Close it. With
// req.Follow it lasts until the container ends (io.EOF), the context ends or Close is called. A stream
// that breaks returns a *CutOffError from Read. The client's timeout bounds the wait for the answer's
// headers, and only without Follow: a followed log is answered once it has something to send, however
// quiet the job is, so only ctx bounds that wait.
func (c *Client) Output(ctx context.Context, req OutputRequest) (*Output, error) {
	// A followed log is answered once it has something to send (the kubelet's stream): only ctx bounds that.
	wait := c.timeout
	if req.Follow != nil && *req.Follow {
		wait = 0
	}
	resp, _, err := c.do(ctx, "output", true, true, wait, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Output(ctx, req, e)
	})
	if err != nil {
		return nil, err
	}
	return &Output{Pod: resp.Header.Get("X-Dispatch-Pod"), body: resp.Body}, nil
}

// Output is rank 0's log as a stream.
type Output struct {
	// Pod is the pod whose log this is (X-Dispatch-Pod).
	Pod    string
	body   io.ReadCloser
	closed atomic.Bool
}

// Read reads the log as it arrives; io.EOF once the agent ended the stream.
func (o *Output) Read(p []byte) (int, error) {
	n, err := o.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !o.closed.Load() {
		err = &CutOffError{Op: "output", Err: err}
	}
	return n, err
}

// Close ends the stream (the agent stops following the log).
func (o *Output) Close() error {
	o.closed.Store(true)
	return o.body.Close()
}

// APIVersion is the version of the agent's API this client speaks: the path prefix /v<APIVersion> and the
// served document's info.version.
const APIVersion = "1"

// operations are the paths this client calls, as the document names them.
var operations = []string{"/v1/start", "/v1/open", "/v1/hold", "/v1/release", "/v1/stop", "/v1/status",
	"/v1/list", "/v1/output", "/v1/preflight", "/v1/capabilities"}

// CheckAgent reads the agent's OpenAPI document (no token needed) and answers ErrUnsupported when the agent
// speaks another API version or lacks an operation this client calls (an older agent); nil otherwise.
func (c *Client) CheckAgent(ctx context.Context) error {
	_, body, err := c.do(ctx, "openapi", true, false, c.timeout, func(ctx context.Context, _ wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Openapi(ctx)
	})
	if err != nil {
		return err
	}
	var doc struct {
		Info  struct{ Version string } `json:"info"`
		Paths map[string]any           `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return &Error{Op: "openapi", Kind: "internal", Message: "the agent's document is not JSON: " + err.Error(), sentinel: ErrInternal}
	}
	if doc.Info.Version != APIVersion {
		return &Error{Op: "openapi", Kind: "unsupported", sentinel: ErrUnsupported,
			Message: fmt.Sprintf("the agent serves API version %q; this client speaks %q", doc.Info.Version, APIVersion)}
	}
	var missing []string
	for _, path := range operations {
		if _, ok := doc.Paths[path]; !ok {
			missing = append(missing, path)
		}
	}
	if len(missing) > 0 {
		return &Error{Op: "openapi", Kind: "unsupported", sentinel: ErrUnsupported,
			Message: "the agent does not serve " + strings.Join(missing, ", ") + " (an older agent)"}
	}
	return nil
}

type sender func(ctx context.Context, edit wire.RequestEditorFn) (*http.Response, error)

func (c *Client) call(ctx context.Context, op string, read bool, send sender) (string, []byte, error) {
	_, body, err := c.do(ctx, op, read, false, c.timeout, send)
	return op, body, err
}

func decode[T any](op string, body []byte, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(body, out); err != nil {
		return nil, &Error{Op: op, Kind: "internal", StatusCode: http.StatusOK, sentinel: ErrInternal,
			Message: fmt.Sprintf("an answer this client cannot read: %v", err)}
	}
	return out, nil
}

// authorize sets the bearer token for one attempt; an error sends nothing.
func (c *Client) authorize(op string) wire.RequestEditorFn {
	return func(ctx context.Context, req *http.Request) error {
		token, err := c.token(ctx)
		if err != nil {
			return &Error{Op: op, Kind: "unauthenticated", sentinel: ErrUnauthenticated, cause: err,
				Message: fmt.Sprintf("no token: %v (nothing was sent)", err)}
		}
		if c.aud != "" {
			auds, err := audiences(token)
			if err != nil || !slices.Contains(auds, c.aud) {
				why := fmt.Sprintf("its audiences are %q", auds)
				if err != nil {
					why = err.Error()
				}
				return &Error{Op: op, Kind: "unauthenticated", sentinel: ErrUnauthenticated,
					Message: fmt.Sprintf("the token is not bound to the audience %q the agent expects: %s (nothing was sent)", c.aud, why)}
			}
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json, text/plain")
		if c.ua != "" {
			req.Header.Set("User-Agent", c.ua)
		}
		return nil
	}
}

var errTimeout = errors.New("no answer within the client's timeout")

// do makes the call, repeating it as the policy and the failure allow. A JSON call's answer is read whole
// (body); a stream's response is returned with its body unread and closing it ends the attempt.
// wait bounds each attempt (a stream's: until its headers); 0 leaves it to ctx.
func (c *Client) do(ctx context.Context, op string, read, stream bool, wait time.Duration, send sender) (*http.Response, []byte, error) {
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		attempt, cancel := context.WithCancelCause(ctx)
		timer := time.AfterFunc(time.Duration(math.MaxInt64), func() {
			cancel(fmt.Errorf("%w (%s): %w", errTimeout, wait, context.DeadlineExceeded))
		})
		if wait > 0 {
			timer.Reset(wait)
		}
		var sent atomic.Bool
		attempt = httptrace.WithClientTrace(attempt, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) },
		})
		var local error
		authorize := c.authorize(op)
		resp, err := send(attempt, func(ctx context.Context, req *http.Request) error {
			if err := authorize(ctx, req); err != nil {
				local = err
				return err
			}
			return nil
		})
		if local != nil {
			timer.Stop()
			cancel(nil)
			return nil, nil, local
		}
		var body []byte
		if err == nil && (!stream || resp.StatusCode != http.StatusOK) {
			body, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
			resp.Body.Close()
		}
		if err != nil {
			timer.Stop()
			if cause := context.Cause(attempt); cause != nil && ctx.Err() == nil {
				err = cause // the client's timeout, not the caller's context
			}
			cancel(nil)
			var failure error
			retry := false
			switch {
			case ctx.Err() != nil && sent.Load():
				return nil, nil, &CutOffError{Op: op, Err: context.Cause(ctx)}
			case ctx.Err() != nil:
				return nil, nil, ctx.Err()
			case sent.Load():
				failure, retry = &CutOffError{Op: op, Err: err}, read
			default:
				failure, retry = unreachable(op, c.server, err), !permanent(err)
			}
			if retry && c.pause(ctx, n, 0) == nil {
				continue
			}
			return nil, nil, failure
		}
		if resp.StatusCode != http.StatusOK {
			timer.Stop()
			cancel(nil)
			e, ours := answerError(op, resp.StatusCode, resp.Header, body)
			if repeatable(e, ours, read) && c.pause(ctx, n, e.RetryAfter) == nil {
				continue
			}
			return nil, nil, e
		}
		if stream {
			timer.Stop() // had it fired, the body's reads fail: a cut-off
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
			return resp, nil, nil
		}
		timer.Stop()
		cancel(nil)
		return resp, body, nil
	}
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
