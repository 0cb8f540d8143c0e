package maps

import "encoding/binary"

var nativeEndian = binary.NativeEndian
