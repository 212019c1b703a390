// Package sandbox owns the sandbox lifecycle: the Manager (state machine and
// persistent records) and the interfaces it consumes (Runtime, LayerStore),
// documented as contracts that every backend implements.
package sandbox
