// Package server assembles the core of Hymical: it opens the store named by
// a database URL, checks the schema, launches the transport plugins and runs
// the worker pool. Its subpackages each own one part: worker (the delivery
// loop and retry schedule) and pluginhost (launching and talking to
// transport plugins). The state machine itself lives in storage, never here.
package server
