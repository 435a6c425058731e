// Command quickstart runs a whole metatree cluster in one process: three
// frontends and two workers over loopback HTTP, with a timeline of what
// happens as nodes restart and fail.
package main

import "fmt"

func main() {
	fmt.Println("metatree quickstart: not built yet")
}
