package api

import _ "embed"

// openapiJSON is the hand-written OpenAPI 3.1 document served at
// /api/v1/openapi.json. A test checks it covers exactly Routes() and that
// its object schemas list the Go types' JSON fields.
//
//go:embed openapi.json
var openapiJSON []byte

// OpenAPI returns the API's OpenAPI 3.1 document (JSON).
func OpenAPI() []byte { return append([]byte(nil), openapiJSON...) }
