package api

import (
	"errors"
	"strings"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// applyHeaders is the custom header set a create or a PATCH asks for.
// An entry without a value, or with the mask answers show, keeps the value
// current has for that name, so a client can PATCH back what it read, or
// rename nothing and reorder, without knowing the values.
func applyHeaders(in []apiwire.EndpointHeader, current []storage.Header) ([]storage.Header, error) {
	out := make([]storage.Header, 0, len(in))
	for i, h := range in {
		if h.Value != nil && *h.Value != apiwire.HeaderValueMask {
			out = append(out, storage.NewHeader(h.Name, *h.Value))
			continue
		}
		j := findHeader(current, h.Name)
		if j < 0 {
			return nil, refuse(apiwire.CodeInvalidHeader, "headers item %d (%q) has no value, and the endpoint has no header of that name whose value it could keep: give the value", i+1, clip(h.Name))
		}
		out = append(out, storage.NewHeader(h.Name, current[j].Reveal()))
	}
	if err := endpoint.CheckHeaders(out); err != nil {
		if errors.Is(err, endpoint.ErrInvalidHeader) {
			return nil, refuse(apiwire.CodeInvalidHeader, "%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalidHeader.Error()+": "))
		}
		return nil, err
	}
	return out, nil
}

func findHeader(hs []storage.Header, name string) int {
	for i, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return i
		}
	}
	return -1
}

// viewHeaders shows custom headers by name only.
func viewHeaders(hs []storage.Header) []apiwire.HeaderInfo {
	out := make([]apiwire.HeaderInfo, len(hs))
	for i, h := range hs {
		out[i] = apiwire.HeaderInfo{Name: h.Name, Value: apiwire.HeaderValueMask}
	}
	return out
}
