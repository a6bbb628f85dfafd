package job

import (
	"fmt"
	"path/filepath"
)

// StateDir is the directory of partition p's stage under the config's
// state.dir: "<state.dir>/partition-<p>". Tools such as inspect find the
// stages there.
func StateDir(root string, p int) string {
	return filepath.Join(root, fmt.Sprintf("partition-%d", p))
}
