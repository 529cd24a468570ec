// Command hello stands in for a plugin in the test command's own tests.
package main

import "fmt"

func main() { fmt.Println("hello from a") }
