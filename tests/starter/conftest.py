"""starter-data's modules, or test stand-ins where they are not on this branch yet."""

import standins

standins.install()
