"""Tests of module_cycles.py on small crate trees written to a temp dir.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parent / "module_cycles.py"


class ModuleCycles(unittest.TestCase):
    def check(self, files: dict) -> tuple:
        """Writes `files` (path under src/ -> text) as crate `demo` and runs
        the script on it: (exit status, stdout)."""
        with tempfile.TemporaryDirectory() as tmp:
            crate = pathlib.Path(tmp) / "demo"
            for rel, text in files.items():
                path = crate / "src" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(text))
            run = subprocess.run(
                [sys.executable, str(SCRIPT), str(crate)], capture_output=True, text=True, check=False
            )
        self.assertEqual(run.stderr, "")
        return run.returncode, run.stdout

    def test_cycle_through_root_reexports_fails(self):
        # Each file names the other's item only through lib.rs's `pub use`.
        status, out = self.check(
            {
                "lib.rs": """
                    mod error;
                    mod keys;
                    pub use error::Error;
                    pub use keys::Keys;
                """,
                "error.rs": """
                    pub struct Error;
                    pub fn missing(_: &crate::Keys) -> Error { Error }
                """,
                "keys.rs": """
                    use crate::Error;
                    pub struct Keys;
                    impl Keys { pub fn get(&self) -> Result<(), Error> { Ok(()) } }
                """,
            }
        )
        self.assertEqual(status, 1, out)
        self.assertIn("import cycle: demo: error <-> keys", out)
        self.assertIn("error -> keys: crate::Keys", out)
        self.assertIn("keys -> error: use crate::Error", out)
        self.assertIn("1 cycles", out)

    def test_same_tree_without_the_back_edge_passes(self):
        status, out = self.check(
            {
                "lib.rs": """
                    mod error;
                    mod keys;
                    pub use error::Error;
                    pub use keys::Keys;
                """,
                "error.rs": "pub struct Error;\n",
                "keys.rs": """
                    use crate::Error;
                    pub struct Keys;
                    impl Keys { pub fn get(&self) -> Result<(), Error> { Ok(()) } }
                """,
            }
        )
        self.assertEqual(status, 0, out)
        self.assertIn("1 crates checked, 0 cycles", out)

    def test_cycle_through_a_nested_reexport_names_the_owner(self):
        # `crate::net::Addr` is re-exported by net/mod.rs from net/addr.rs,
        # which uses `cfg`; `cfg` uses the address through the re-export.
        status, out = self.check(
            {
                "lib.rs": "pub mod cfg;\npub mod net;\n",
                "net/mod.rs": "mod addr;\npub use self::addr::Addr;\n",
                "net/addr.rs": "pub struct Addr(pub crate::cfg::Port);\n",
                "cfg.rs": "pub struct Port;\npub fn default_addr() -> crate::net::Addr { todo!() }\n",
            }
        )
        self.assertEqual(status, 1, out)
        self.assertIn("demo: cfg <-> net <-> net::addr", out)
        self.assertIn("net::addr -> cfg: crate::cfg::Port", out)

    def test_cycle_between_two_module_trees_fails(self):
        # No two files form a cycle, but the `jobs` tree and the `runner`
        # tree use each other.
        status, out = self.check(
            {
                "lib.rs": "pub mod jobs;\npub mod runner;\n",
                "jobs/mod.rs": "pub mod copy;\npub trait Job {}\n",
                "jobs/copy.rs": "use crate::runner::Ctx;\npub fn run(_: &Ctx) {}\n",
                "runner/mod.rs": "pub mod thread;\npub struct Ctx;\n",
                "runner/thread.rs": "use crate::jobs::Job;\npub fn spawn(_: &dyn Job) {}\n",
            }
        )
        self.assertEqual(status, 1, out)
        self.assertIn("demo: jobs/ <-> runner/", out)
        self.assertIn("runner/ -> jobs/: runner::thread -> jobs: use crate::jobs::Job", out)

    def test_tests_comments_and_strings_are_not_edges(self):
        status, out = self.check(
            {
                "lib.rs": "mod a;\nmod b;\npub use a::A;\n",
                "a.rs": """
                    /// Uses [`crate::b::B`] only in its docs: "crate::b::B".
                    pub struct A;
                    pub const NAME: &str = "crate::b::B";
                    #[cfg(test)]
                    #[path = "a_tests.rs"]
                    mod tests;
                """,
                "a_tests.rs": "use crate::b::B;\n",
                "b.rs": """
                    pub struct B(pub crate::A);
                    #[cfg(test)]
                    mod tests {
                        use crate::a::NAME;
                    }
                """,
            }
        )
        self.assertEqual(status, 0, out)

    def test_glob_reexport_is_followed(self):
        status, out = self.check(
            {
                "lib.rs": "mod model;\nmod check;\npub use model::*;\n",
                "model.rs": "pub struct Spec;\npub fn ok(s: &Spec) -> bool { crate::check::valid(s) }\n",
                "check.rs": "use crate::Spec;\npub fn valid(_: &Spec) -> bool { true }\n",
            }
        )
        self.assertEqual(status, 1, out)
        self.assertIn("demo: check <-> model", out)


if __name__ == "__main__":
    unittest.main()
