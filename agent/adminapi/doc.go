// Package adminapi is the admin API's wire format: the JSON bodies of GET
// /api/v1/models, /api/v1/sessions, /api/v1/stats, /api/v1/warden and
// /readyz, and of the PUTs that change a model. The warden (package
// agent) serves them, the placement fills the model status, and the CLI,
// the endpoint picker and the benchmark decode them without linking the
// warden. Types, and WriteJSON, the one way both admin servers (the
// warden's and the picker's) write them; no other behaviour.
package adminapi
