//! The `orbit` binary: the server and the command-line client.

fn main() {
    println!("orbit");
}
