package apiwire

import "fmt"

// ErrorResponse is every answer other than success, on every route:
// {"error":{"code":"…","message":"…"}}.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Error is the API's error: a stable code for programs and a message for
// people, which says what was wrong and what to do.
type Error struct {
	// Status is the HTTP status the error came with. It is not in the
	// body: a client sets it from the response.
	Status  int    `json:"-"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Error is "STATUS CODE: MESSAGE", or "CODE: MESSAGE" without a status.
func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}
