package api

import _ "embed"

// OpenAPI is the OpenAPI 3.0 document of the control-plane REST API (and the
// data plane, described as a pass-through to the agent protocol), served at
// GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
