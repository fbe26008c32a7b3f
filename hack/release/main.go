// Command release builds a pgloop release into dist/<version>/ and
// publishes its image, without CI: docs/releasing.md.
package main

func main() {}
