// Package wire is the agent API's wire types and raw client, generated from the OpenAPI document the agent
// serves (clients/go/openapi.json) by the oapi-codegen that go.mod's tool directive pins. Do not edit
// wire.gen.go: change the agent, export its document again and regenerate (docs/api.md, "From Go").
package wire

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.json
