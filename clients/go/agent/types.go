package agent

import "github.com/phpboyscout/dispatch-k8s/clients/go/internal/wire"

// The API's requests and answers, as the agent's OpenAPI document defines them (generated into
// internal/wire; every schema of the document has its name here, checked by TestEverySchemaHasItsType).
// A field the document marks nullable or optional is a pointer; Ptr makes one.
type (
	StartRequest       = wire.StartRequest
	StartResponse      = wire.StartResponse
	RuntimeRef         = wire.RuntimeRef
	RuntimeRefKind     = wire.RuntimeRefKind
	KueueSpec          = wire.KueueSpec
	CredentialSpec     = wire.CredentialSpec
	PublishSpec        = wire.PublishSpec
	PublishSpecVia     = wire.PublishSpecVia
	ObjectRef          = wire.ObjectRef
	OpenResponse       = wire.OpenResponse
	HoldRequest        = wire.HoldRequest
	OutcomeResponse    = wire.OutcomeResponse
	StatusResponse     = wire.StatusResponse
	StatusResponseGate = wire.StatusResponseGate
	StatusResponseMode = wire.StatusResponseMode
	ExecutionModel     = wire.ExecutionModel
	PodStatusModel     = wire.PodStatusModel
	HoldModel          = wire.HoldModel
	OutputRequest      = wire.OutputRequest
	ListRequest        = wire.ListRequest
	ListResponse       = wire.ListResponse
	ListItem           = wire.ListItem
	PreflightRequest   = wire.PreflightRequest
	Capabilities       = wire.Capabilities
	CapabilitiesMode   = wire.CapabilitiesMode
	ErrorResponse      = wire.ErrorResponse
	WorkerRemainsModel = wire.WorkerRemainsModel
)

// The values of the document's enums.
const (
	ClusterTrainingRuntime  = wire.RuntimeRefKindClusterTrainingRuntime
	TrainingRuntime         = wire.RuntimeRefKindTrainingRuntime
	PublishViaImage         = wire.PublishSpecViaImage
	PublishViaInitContainer = wire.PublishSpecViaInitContainer
	GateOpen                = wire.StatusResponseGateOpen
	GateClosed              = wire.StatusResponseGateClosed
	ModeKueue               = wire.StatusResponseModeKueue
	ModePlain               = wire.StatusResponseModePlain
	CapabilitiesModeKueue   = wire.CapabilitiesModeKueue
	CapabilitiesModePlain   = wire.CapabilitiesModePlain
)

// Ptr returns a pointer to v, for the optional fields: Kueue: &agent.KueueSpec{...}, Follow: agent.Ptr(true).
func Ptr[T any](v T) *T { return &v }
