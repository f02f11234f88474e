// Package agent is the Go client of the dispatch-k8s agent's API: the calls a supervisor makes to run
// dispatch TrainJobs on Kubernetes (docs/api.md in the repository).
//
//	c, err := agent.New("https://dispatch-k8s.dispatch-system.svc:8443",
//		agent.WithCAFile("/var/run/dispatch/ca.crt"),             // re-read hourly and after a certificate failure
//		agent.WithTokenFile("/var/run/secrets/dispatch/token"), // read at every call: it rotates
//		agent.WithAudience("dispatch-agent"))                   // when the agent sets tokenAudiences
//	caps, err := c.Preflight(ctx, agent.PreflightRequest{...})
//	started, err := c.Start(ctx, agent.StartRequest{JobID: agent.NewJobID(), ...})
//	ref := started.Ref() // record it first
//	opened, err := c.Open(ctx, ref)
//
// One method per operation (Preflight, Start, Open, Hold, Release, Stop, Status, Output, List, and
// Capabilities), each taking a context.Context and CallOptions (WithCallRetry, WithCallTimeout). Every call
// about one TrainJob takes its ObjectRef: from StartResponse.Ref, or ListItem.Ref after a restart. Client
// implements Interface; package agentfake is an in-memory agent implementing it too, for a supervisor's
// tests. The requests and answers are this package's types (phases, outcomes, verdicts and check states are
// typed strings with constants; timestamps are time.Time), converted at the edge from the types generated
// from the agent's OpenAPI document (clients/go/openapi.json, served at GET /v1/openapi.json).
//
// # Errors
//
// An error the agent answers is an *Error, matched by errors.Is to the sentinel of its kind: ErrInvalid,
// ErrUnauthenticated, ErrForbidden, ErrNotFound, ErrRejected, ErrConflict, ErrRateLimited, ErrExpired, ErrObserveOnly,
// ErrUnavailable, ErrInternal (docs/api.md, Errors, says what each means; each method's documentation says
// which it answers and, for ErrConflict, what the conflict is there). The *Error carries the agent's Message,
// the Field of an invalid request, the Orphans an earlier TrainJob left, and RetryAfter. An agent that could
// not be reached is ErrUnavailable, and then nothing was sent.
//
// A call that was sent and then cut off (the connection closed or reset, a timeout, the context ended)
// is a *CutOffError matching ErrOutcomeUnknown: it may or may not have taken effect. Either re-read to learn
// what happened (Status; List by JobID after a Start) and decide, or repeat the same call: every operation
// is safe to repeat (docs/api.md, "Repeating a call").
//
// Once the caller's context has ended, the call's error matches context.Canceled or
// context.DeadlineExceeded (and ErrOutcomeUnknown when the request had been sent), never an agent error
// of an earlier attempt: a cancellation during the client's own backoff is the context's error.
//
// # Retries
//
// A Client repeats a call by itself, with exponential backoff and jitter (RetryPolicy; DefaultRetryPolicy
// unless WithRetry or WithCallRetry), only when that is safe whatever the operation:
//   - the agent answered rate_limited (nothing was read or written), after its Retry-After;
//   - the agent answered unavailable: every operation is safe to repeat, and the same call completes an
//     interrupted Start, Hold or Release;
//   - the connection failed before the request was sent (a certificate the CA bundle does not verify: once,
//     after reading the bundle again);
//   - for the reads (Status, List, Output before its answer, Capabilities), a cut-off or a 5xx that is
//     not the agent's own answer (a proxy's).
//
// Writes (Start, Open, Hold, Release, Stop, Preflight) are never repeated after a cut-off: the caller
// gets ErrOutcomeUnknown. Conflicts and everything else are the caller's to judge. WithRateLimit bounds
// the calls a second on this side (a token bucket, as client-go's QPS and Burst).
//
// # Transport
//
// TLS is verified against the agent's CA (WithCAFile or WithCASource, read again every DefaultCARefresh and
// once after a certificate the bundle does not verify, as docs/certs.md asks of clients; WithCA, fixed; else
// the system's roots), TLS 1.2 or later. The bearer token is asked of its TokenSource at every attempt
// (WithTokenFile re-reads the file, as projected ServiceAccount tokens rotate). WithAudience refuses, before
// sending, a token not bound to the agent's audience. Each attempt is bounded by WithTimeout (DefaultTimeout);
// connections are kept alive and the agent's Connection: close (a replica that is stopping) is honoured.
// HTTPS_PROXY and NO_PROXY are honoured (WithProxy chooses otherwise). WithResolve connects to a name at a
// given address, as the CLI's --resolve; WithDialContext replaces the dialer.
//
// Output is a stream (io.ReadCloser), never buffered whole; with Follow it lasts until the container
// ends, the context ends, or Close. List is an iterator over the pages (iter.Seq2), passing each
// continue token back; ListAll concatenates them.
//
// # Versions
//
// The API is versioned by its path prefix (/v1) and the document's info.version ("1", APIVersion). Within a
// version the API only grows: new operations, new optional request fields, new answer fields, new error
// kinds. A breaking change (an operation or field removed or renamed, a field made required or given
// another type or meaning, an error given another kind or HTTP status) is a new version, /v2, served
// beside /v1 for as long as the agent's upgrade notes (CHANGELOG.md, Upgrade notes) say.
//
// This module (github.com/phpboyscout/dispatch-k8s/clients/go) follows semantic versioning of its own Go
// API: a removed or changed method, option or field of package agent is a new major version of the module
// (a /v2 suffix on its path). Fields the document adds appear as new struct fields, which is not breaking
// for keyed struct literals. A field the document turns from required to optional becomes a pointer:
// that is breaking in Go even where the wire is compatible, so it waits for a major version. New outcomes,
// phases, verdicts and check states may appear within /v1: compare with the constants and treat an unknown
// value as the API says (an unknown outcome is still success).
//
// How the client tells an old agent: CheckAgent reads the served document and answers ErrUnsupported when
// the version differs or an operation this client calls is missing; a call to an operation the agent does
// not serve answers ErrUnsupported (never ErrNotFound, which is about TrainJobs: a 404 that is not the agent's own answer, a proxy's or a server's that does not know the path, is ErrUnsupported too); and an agent that does not
// know a request field refuses it as ErrInvalid naming the Field, since the agent refuses unknown fields.
// The client sends only the fields a caller set, so a newer client works with an older agent as long as
// the caller uses what that agent knows. Answer fields a newer agent adds are ignored by an older client.
package agent
