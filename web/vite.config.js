// The page of `loopctl web`, built into the Python package (src/loopctl/ui/static) by `python3 make.py web`.
// The output is committed and shipped in the wheel; tests/ui/test_assets.py rebuilds it and compares bytes.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/",
  logLevel: "warn",
  build: {
    outDir: "../src/loopctl/ui/static",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    reportCompressedSize: false,
  },
});
