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

// Interface is what a supervisor calls: Client implements it, and agentfake.Agent is an in-memory agent
// that keeps the same contract, for a supervisor's tests.
type Interface interface {
	Preflight(ctx context.Context, req PreflightRequest, opts ...CallOption) (*Capabilities, error)
	Capabilities(ctx context.Context, opts ...CallOption) (*Capabilities, error)
	Start(ctx context.Context, req StartRequest, opts ...CallOption) (*StartResponse, error)
	Open(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OpenResponse, error)
	Hold(ctx context.Context, ref ObjectRef, req HoldRequest, opts ...CallOption) (*OutcomeResponse, error)
	Release(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OutcomeResponse, error)
	Stop(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OutcomeResponse, error)
	Status(ctx context.Context, ref ObjectRef, opts ...CallOption) (*Status, error)
	List(ctx context.Context, req ListRequest, opts ...CallOption) iter.Seq2[*ListResponse, error]
	ListAll(ctx context.Context, req ListRequest, opts ...CallOption) ([]ListItem, error)
	Watch(ctx context.Context, req WatchRequest, opts ...CallOption) (*WatchResponse, error)
	Output(ctx context.Context, ref ObjectRef, opts OutputOptions, call ...CallOption) (*Output, error)
}

var _ Interface = (*Client)(nil)

// Client calls one agent. It is safe for concurrent use.
type Client struct {
	server  string
	raw     *wire.Client
	http    *http.Client
	ca      *caTransport // nil when the CA is fixed (WithCA, WithTLSConfig, the system's roots)
	token   TokenSource
	aud     string
	ua      string
	timeout time.Duration
	retry   RetryPolicy
	limit   *limiter
	sleep   func(context.Context, time.Duration) error
}

// New makes a client of the agent at server (https://host:port). A token option is required.
func New(server string, opts ...Option) (*Client, error) {
	cfg := config{timeout: DefaultTimeout, retry: DefaultRetryPolicy(), caRefresh: DefaultCARefresh, proxy: http.ProxyFromEnvironment}
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
	rt, ca, err := cfg.transport()
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
	return &Client{server: server, raw: raw, http: hc, ca: ca, token: cfg.token, aud: cfg.audience, ua: cfg.userAgent,
		timeout: cfg.timeout, retry: cfg.retry, limit: cfg.limiter, sleep: sleep}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	if c.ca != nil {
		c.ca.CloseIdleConnections()
	}
}

// Preflight proves the gates of the request's mode and answers the capabilities. A failing Preflight answers
// (Capabilities.ObserveOnly true, with the reason); it is not an error. Errors: ErrInvalid, ErrForbidden,
// ErrUnavailable; ErrOutcomeUnknown when cut off (a probe: simply call it again).
func (c *Client) Preflight(ctx context.Context, req PreflightRequest, opts ...CallOption) (*Capabilities, error) {
	body, err := toWire[wire.PreflightRequest](req)
	if err != nil {
		return nil, invalidRequest("preflight", err)
	}
	return decode[Capabilities](c.call(ctx, "preflight", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Preflight(ctx, body, e)
	}))
}

// Capabilities is the report of the last Preflight (of the mode that ran last), without probing.
func (c *Client) Capabilities(ctx context.Context, opts ...CallOption) (*Capabilities, error) {
	return decode[Capabilities](c.call(ctx, "capabilities", true, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Capabilities(ctx, e)
	}))
}

// Start creates the TrainJob, closed (PhaseGated). Record the answer's name and uid (StartResponse.Ref)
// before anything else. The same request again answers the same TrainJob.
//
// Errors: ErrInvalid (the request; Error.Field), ErrObserveOnly, ErrRejected (the TrainJob would not be as
// written, or the name was opened before: a new run needs a new N), ErrConflict (the name belongs to an earlier
// TrainJob that left objects, in Error.Orphans, or to one made from another request: List by JobID, Stop what
// is left, then Start with another N). ErrOutcomeUnknown when cut off: Start again with the same request, or
// List by JobID.
func (c *Client) Start(ctx context.Context, req StartRequest, opts ...CallOption) (*StartResponse, error) {
	body, err := toWire[wire.StartRequest](req)
	if err != nil {
		return nil, invalidRequest("start", err)
	}
	return decode[StartResponse](c.call(ctx, "start", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Start(ctx, body, e)
	}))
}

// Open lets the TrainJob past its start gate. Legal in PhaseGated; an open job answers OutcomeAlreadyOpen.
//
// Errors: ErrNotFound (gone, or its name is another UID's), ErrObserveOnly, ErrRejected (it ended without
// ever being opened, or is not dispatch's), ErrConflict (another UID holds the name; plain mode: a pod of a
// previous execution may still run, named in the message, or someone else unsuspended it; or the TrainJob kept
// changing under the agent's write, as Trainer writes a new TrainJob's status in its first seconds: nothing
// was written, re-read and call again, bounded).
func (c *Client) Open(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OpenResponse, error) {
	body := wireRef(ref)
	return decode[OpenResponse](c.call(ctx, "open", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Open(ctx, body, e)
	}))
}

// Hold suspends the TrainJob (plain mode) or deactivates its Workload (Kueue mode), recording who and why.
// Legal in every phase but Complete and Failed, before Open too; allowed while observe-only. The same Hold
// again writes only what is missing.
//
// Errors: ErrNotFound, ErrInvalid (Until), ErrRejected (it ended, or is not dispatch's), ErrConflict (another
// UID holds the name; Kueue mode and its Workload is not there; or the objects kept changing under the write:
// Status, then call again).
func (c *Client) Hold(ctx context.Context, ref ObjectRef, req HoldRequest, opts ...CallOption) (*OutcomeResponse, error) {
	body := holdBody(ref, req)
	return decode[OutcomeResponse](c.call(ctx, "hold", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Hold(ctx, body, e)
	}))
}

// Release lifts dispatch's hold; a job that is not held answers OutcomeNotHeld.
//
// Errors: ErrNotFound, ErrObserveOnly, ErrRejected (not dispatch's), ErrConflict (another UID holds the name;
// plain mode: a pod of the previous execution may still run, nothing written: call again once it is gone,
// with a bound; Kueue mode: its Workload is not there; or the objects kept changing under the write).
func (c *Client) Release(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OutcomeResponse, error) {
	body := wireRef(ref)
	return decode[OutcomeResponse](c.call(ctx, "release", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Release(ctx, body, e)
	}))
}

// Stop deletes the TrainJob (this uid) in the foreground: Status shows its DeletionTimestamp until its pods
// are gone. Legal in every phase; gone already is success (OutcomeAlreadyGone).
//
// Errors: ErrRejected (not dispatch's), ErrConflict (its name now belongs to another UID: nothing deleted).
func (c *Client) Stop(ctx context.Context, ref ObjectRef, opts ...CallOption) (*OutcomeResponse, error) {
	body := wireRef(ref)
	return decode[OutcomeResponse](c.call(ctx, "stop", false, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Stop(ctx, body, e)
	}))
}

// Status is what the cluster shows of the TrainJob. A TrainJob that is gone (or replaced) is ErrNotFound,
// with the orphans it left in the *Error. Status never answers ErrConflict.
func (c *Client) Status(ctx context.Context, ref ObjectRef, opts ...CallOption) (*Status, error) {
	body := wireRef(ref)
	return decode[Status](c.call(ctx, "status", true, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Status(ctx, body, e)
	}))
}

// List yields dispatch's TrainJobs in req.Namespace page by page, passing each page's continue token back;
// it stops after the last page, or after yielding an error. req.Continue, when set, is the first page's.
// An expired continue token is ErrInvalid: List again from the start.
func (c *Client) List(ctx context.Context, req ListRequest, opts ...CallOption) iter.Seq2[*ListResponse, error] {
	return func(yield func(*ListResponse, error) bool) {
		for {
			body, err := toWire[wire.ListRequest](req)
			if err != nil {
				yield(nil, invalidRequest("list", err))
				return
			}
			page, err := decode[ListResponse](c.call(ctx, "list", true, opts, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
				return c.raw.List(ctx, body, e)
			}))
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.Continue == "" {
				return
			}
			req.Continue = page.Continue
		}
	}
}

// ListAll is every page of List, its items concatenated.
func (c *Client) ListAll(ctx context.Context, req ListRequest, opts ...CallOption) ([]ListItem, error) {
	var items []ListItem
	for page, err := range c.List(ctx, req, opts...) {
		if err != nil {
			return nil, err
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// Watch answers the TrainJobs of req.Namespace changed after req.Version (all of them now, without one),
// waiting up to req.Wait for one; pass the answer's Version to the next call. Every change is in a later
// answer whichever replica of the agent answers; a job is reported as it is now, and may repeat. Call Status
// for the whole story of a job that changed. Changes loops over it.
//
// Errors: ErrExpired (watch again without a Version), ErrRateLimited (too many calls of this user waiting:
// after Error.RetryAfter). Watch never answers ErrConflict or ErrNotFound.
func (c *Client) Watch(ctx context.Context, req WatchRequest, opts ...CallOption) (*WatchResponse, error) {
	seconds := int(req.Wait / time.Second)
	body, err := toWire[wire.WatchRequest](watchBody{Namespace: req.Namespace, Version: req.Version, TimeoutSeconds: seconds})
	if err != nil {
		return nil, invalidRequest("watch", err)
	}
	call := c.callConfig(opts)
	wait := call.timeout
	if wait > 0 {
		wait += time.Duration(seconds) * time.Second // the agent holds the call that long on purpose
	}
	_, raw, err := c.do(ctx, "watch", true, false, wait, call, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Watch(ctx, body, e)
	})
	return decode[WatchResponse]("watch", raw, err)
}

// Changes yields every dispatch TrainJob of namespace as it is now, then each as it changes, until ctx ends
// or a call fails (the error is yielded last; a context's error matches errors.Is as everywhere). It calls
// Watch in a loop, waiting up to 30 s per call, and starts again from a snapshot on ErrExpired.
func (c *Client) Changes(ctx context.Context, namespace string, opts ...CallOption) iter.Seq2[ListItem, error] {
	return func(yield func(ListItem, error) bool) {
		version := ""
		for {
			answer, err := c.Watch(ctx, WatchRequest{Namespace: namespace, Version: version, Wait: 30 * time.Second}, opts...)
			switch {
			case errors.Is(err, ErrExpired):
				version = ""
				continue
			case err != nil:
				yield(ListItem{}, err)
				return
			}
			for _, item := range answer.Items {
				if !yield(item, nil) {
					return
				}
			}
			version = answer.Version
		}
	}
}

// Output streams rank 0's log as the agent sends it, never buffered whole: read it, then Close it. With
// Follow it lasts until the container ends (io.EOF), the context ends or Close is called. A stream that
// breaks returns a *CutOffError from Read. The client's timeout bounds the wait for the answer's headers,
// and only without Follow: a followed log is answered once it has something to send, however quiet the job
// is, so only ctx bounds that wait.
//
// Errors: ErrNotFound (the TrainJob, or rank 0's pod, is not there), ErrRateLimited (too many followed
// streams: after Error.RetryAfter).
func (c *Client) Output(ctx context.Context, ref ObjectRef, o OutputOptions, opts ...CallOption) (*Output, error) {
	body := outputBody(ref, o)
	call := c.callConfig(opts)
	wait := call.timeout
	if o.Follow {
		// A followed log is answered once it has something to send (the kubelet's stream): only ctx bounds that.
		wait = 0
	}
	resp, _, err := c.do(ctx, "output", true, true, wait, call, func(ctx context.Context, e wire.RequestEditorFn) (*http.Response, error) {
		return c.raw.Output(ctx, body, e)
	})
	if err != nil {
		return nil, err
	}
	return &Output{Pod: resp.Header.Get("X-Dispatch-Pod"), body: resp.Body}, nil
}

// NewOutput is an Output reading body, for fakes of Interface (agentfake) and tests.
func NewOutput(pod string, body io.ReadCloser) *Output { return &Output{Pod: pod, body: body} }

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
	"/v1/list", "/v1/watch", "/v1/output", "/v1/preflight", "/v1/capabilities"}

// CheckAgent reads the agent's OpenAPI document (no token needed) and answers ErrUnsupported when the agent
// speaks another API version or lacks an operation this client calls (an older agent); nil otherwise.
func (c *Client) CheckAgent(ctx context.Context) error {
	_, body, err := c.do(ctx, "openapi", true, false, c.timeout, c.callConfig(nil), func(ctx context.Context, _ wire.RequestEditorFn) (*http.Response, error) {
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

func (c *Client) call(ctx context.Context, op string, read bool, opts []CallOption, send sender) (string, []byte, error) {
	call := c.callConfig(opts)
	_, body, err := c.do(ctx, op, read, false, call.timeout, call, send)
	return op, body, err
}

// toWire converts a request of this package to the generated type, by the JSON names both share.
func toWire[W any](v any) (W, error) {
	var out W
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	return out, err
}

func invalidRequest(op string, err error) *Error {
	return &Error{Op: op, Kind: "invalid", sentinel: ErrInvalid, cause: err,
		Message: fmt.Sprintf("the request cannot be encoded: %v (nothing was sent)", err)}
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
// wait bounds each attempt (a stream's: until its headers); 0 leaves it to ctx. Once ctx has ended, its error
// is the call's (a *CutOffError matching it when the request was sent), never an earlier attempt's.
func (c *Client) do(ctx context.Context, op string, read, stream bool, wait time.Duration, call callConfig, send sender) (*http.Response, []byte, error) {
	reread := false // the CA was re-read after a certificate failure in this call
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if c.limit != nil {
			if err := c.limit.wait(ctx); err != nil {
				return nil, nil, err
			}
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
				return nil, nil, &CutOffError{Op: op, Err: contextError(ctx)}
			case ctx.Err() != nil:
				return nil, nil, contextError(ctx)
			case sent.Load():
				failure, retry = &CutOffError{Op: op, Err: err}, read
			case permanent(err) && c.ca != nil && !reread:
				// The agent's certificate may have been issued by a CA rotated in after the bundle was read:
				// re-read it and try once more (nothing was sent).
				reread = true
				if c.ca.refresh(true) == nil {
					n--
					continue
				}
				failure = unreachable(op, c.server, err)
			default:
				failure, retry = unreachable(op, c.server, err), !permanent(err)
			}
			if !retry {
				return nil, nil, failure
			}
			if err := c.pause(ctx, call.retry, n, 0); err != nil {
				return nil, nil, lastOr(ctx, failure)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			timer.Stop()
			cancel(nil)
			e, ours := answerError(op, resp.StatusCode, resp.Header, body)
			if !repeatable(e, ours, read) {
				return nil, nil, e
			}
			if err := c.pause(ctx, call.retry, n, e.RetryAfter); err != nil {
				return nil, nil, lastOr(ctx, e)
			}
			continue
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

// lastOr is the call's error once no attempt is left: the context's, once it ended (the caller's
// cancellation wins over the agent's last answer), else the last attempt's failure.
func lastOr(ctx context.Context, failure error) error {
	if ctx.Err() != nil {
		return contextError(ctx)
	}
	return failure
}

// contextError is ctx's error, matching context.Canceled or DeadlineExceeded, with its cause when the caller
// gave one.
func contextError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
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

func wireRef(r ObjectRef) wire.ObjectRef {
	return wire.ObjectRef{Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

func holdBody(ref ObjectRef, req HoldRequest) wire.HoldRequest {
	body := wire.HoldRequest{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, Who: req.Who, Reason: req.Reason}
	if !req.Until.IsZero() {
		body.Until = Ptr(req.Until.Format(time.RFC3339Nano))
	}
	return body
}

func outputBody(ref ObjectRef, o OutputOptions) wire.OutputRequest {
	body := wire.OutputRequest{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, TailLines: o.TailLines}
	if o.Follow {
		body.Follow = Ptr(true)
	}
	return body
}
