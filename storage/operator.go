package storage

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxOperatorBytes bounds an operator's name in a replay's audit record.
const MaxOperatorBytes = 64

// OperatorName cleans a name an operator gave for a replay's audit record
// (DeliveryReplayParams.Actor), the same from the API and the console: runes
// other than letters, digits, spaces and "@._+-" become '_', it is cut to
// MaxOperatorBytes, and surrounding '_' and spaces are trimmed. It returns
// "" when nothing is left.
func OperatorName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r != ' ' && !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("@._+-", r) {
			r = '_'
		}
		if b.Len()+utf8.RuneLen(r) > MaxOperatorBytes {
			break
		}
		b.WriteRune(r)
	}
	return strings.Trim(b.String(), "_ ")
}
