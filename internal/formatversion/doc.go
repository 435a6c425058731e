// Package formatversion holds the mark that every metatree package's
// unknown-format-version error carries (catalog, image and journal each
// wrap ErrUnknown in their own ErrUnknownVersion). A package that hands
// another's bytes on, as the image store hands an image's body to the
// state that loads it, tells a format it cannot read (written by a newer
// binary: kept, reported, never guessed at) from a corrupt one (set aside)
// without importing the package that wrote it.
package formatversion
