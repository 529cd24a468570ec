package api

// ReadableJSON reports whether receivers can read the well-formed JSON
// text b by the API's rules at the default nesting limit, as the reference
// the fuzz tests hold checkJSON to decides it.
func ReadableJSON(b []byte) bool { return len(readableJSON(b, DefaultMaxNestingDepth)) == 0 }
