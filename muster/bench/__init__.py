"""One module per `muster bench` command: each measures one thing and prints figures and a JSON
line. Benches drive the packages below (and a whole `muster run`); nothing below imports them."""
