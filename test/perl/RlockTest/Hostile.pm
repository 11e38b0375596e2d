
=pod

=head1 NAME

RlockTest::Hostile - a relay between rlock and a real Redis that can lie:
replace the reply to chosen commands, inject frames nobody asked for,
deliver replies byte by byte, close in the middle of a reply, or send a
bulk string that never ends

=head1 SYNOPSIS

  my $hostile = RlockTest::Hostile->start($redis->port);
  # point rlock.port at $hostile->port
  $hostile->replace('rlock_command', qr/^EXISTS /, ":1\r\n" x 0 . "\$1\r\nx\r\n");
  $hostile->inject('rlock_subscriber', "*1\r\n\$7\r\nmessage\r\n");
  # "*8", then seven bulk strings of 1,000,000 x: an array one short
  $hostile->inject_bulks('rlock_command', "*8\r\n", 7, 1_000_000);
  my $left = $hostile->unsent;     # bytes not yet written to clients
  my $n = $hostile->commands;      # commands relayed so far, all clients
  $hostile->clear;                 # honest again
  $hostile->stop;

=head1 DESCRIPTION

The relay runs in a child process.  Each client connection gets its own
connection to Redis.  The relay parses RESP both ways: it keeps, per
connection, the commands sent and not yet answered, so it knows which
reply answers which command, and it knows a connection by the name its
client gives itself with CLIENT SETNAME (rlock_command,
rlock_subscriber).  Published messages are passed through untouched.

Rules name a client ('*' for any), a pattern matched against the command (its
arguments joined by spaces) and what to do with the reply to the next
matching commands (all of them unless a count is given):

  replace    send these bytes instead of the reply
  after      send these bytes right after the reply
  close_mid  send half of the reply, then close the connection
  stream     send these bytes, then junk for as long as the client reads
  mute       send nothing, neither this reply nor any later one on that
             connection (a server that stops answering, connection open)

trickle() makes the relay deliver everything to a client one byte at a
time; inject() sends bytes to a client at once, and inject_bulks() bytes
followed by bulk strings made in the relay (large lies cost no control
traffic).  start() takes the ports option of RlockTest::Relay: a relay
on many ports looks like many servers.

=cut

package RlockTest::Hostile;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Socket qw(IPPROTO_TCP TCP_NODELAY);
use PostgreSQL::Test::Utils ();
use Test::More ();
use RlockTest::Cluster ();
use RlockTest::Relay;
use parent -norequire, 'RlockTest::Relay';

# A Redis Cluster of one real node serving every slot (plain TCP), and a
# relay in front of it on $opt{ports} ports (default 1): returns both.  A
# map the relay tells can name each port a primary of its own, all of them
# that one node.
sub cluster_of_one
{
	my ($class, %opt) = @_;
	my $redis = RlockTest::Redis->start(
		port => RlockTest::Cluster->free_port_pair,
		tls => 0,
		args => [ '--cluster-enabled', 'yes',
			'--cluster-config-file', PostgreSQL::Test::Utils::tempdir() . '/nodes.conf' ]);
	Test::More::is($redis->cmd('CLUSTER', 'ADDSLOTSRANGE', 0, 16383), 'OK',
		'one node serves every slot');
	Test::More::ok(
		RlockTest::wait_until(
			sub { ($redis->cmd('CLUSTER', 'INFO') // '') =~ /^cluster_state:ok/m }, 10),
		'the one-node cluster is up');
	return ($redis, $class->start($redis->port, ports => $opt{ports} // 1));
}

# Send a control line, return the relay's one-line answer.
sub _ask
{
	my ($self, @words) = @_;
	my $answer = $self->ask(join(' ', @words));
	die "hostile relay: no answer\n" unless defined $answer;
	return $answer;
}

sub _hex { return unpack('H*', $_[0] // '') }

sub _rule
{
	my ($self, $action, $client, $pattern, $bytes, %opt) = @_;
	return $self->_ask('rule', $action, $client, _hex("$pattern"),
		_hex($bytes), $opt{count} // -1);
}

sub replace { my $self = shift; return $self->_rule('replace', @_) }
sub after { my $self = shift; return $self->_rule('after', @_) }

sub close_mid
{
	my ($self, $client, $pattern, %opt) = @_;
	return $self->_rule('close_mid', $client, $pattern, '', %opt);
}

sub stream { my $self = shift; return $self->_rule('stream', @_) }

sub mute
{
	my ($self, $client, $pattern, %opt) = @_;
	return $self->_rule('mute', $client, $pattern, '', %opt);
}

sub inject
{
	my ($self, $client, $bytes) = @_;
	return $self->_ask('inject', $client, _hex($bytes));
}

sub inject_bulks
{
	my ($self, $client, $head, $count, $size) = @_;
	return $self->_ask('inject_bulks', $client, _hex($head), $count, $size);
}

# Bytes waiting in the relay to be written to its clients.
sub unsent { return $_[0]->_ask('unsent') + 0 }

sub trickle
{
	my ($self, $client, $on) = @_;
	return $self->_ask('trickle', $client, $on ? 1 : 0);
}

# Forget every rule and stop splitting; with a client name, only for that
# client (the other rules hold throughout).
sub clear
{
	my ($self, $client) = @_;
	return $self->_ask('clear', defined $client ? ($client) : ());
}

# Commands relayed so far, from every client.
sub commands { return $_[0]->_ask('commands') + 0 }

# Connections that named themselves $client so far.
sub connections
{
	my ($self, $client) = @_;
	return $self->_ask('connections', $client) + 0;
}

# Close every client connection (and its connection to Redis).
sub drop_all { return $_[0]->_ask('drop') }

#---- the child ----

# One complete RESP value at the start of $buf: its length in bytes, 0 if
# incomplete.  With $want_array, also returns its elements when it is an
# array of bulk strings (for commands and for telling pushes apart).
sub _value_length
{
	my ($buf, $pos) = @_;
	$pos //= 0;
	my $eol = index($buf, "\r\n", $pos);
	return 0 if $eol < 0;
	my $type = substr($buf, $pos, 1);
	my $arg = substr($buf, $pos + 1, $eol - $pos - 1);
	my $end = $eol + 2;
	if ($type eq '$')
	{
		return $end - $pos if $arg < 0;
		return 0 if length($buf) < $end + $arg + 2;
		return $end + $arg + 2 - $pos;
	}
	if ($type eq '*')
	{
		return $end - $pos if $arg < 0;
		my $at = $end;
		for (1 .. $arg)
		{
			my $len = _value_length($buf, $at);
			return 0 unless $len;
			$at += $len;
		}
		return $at - $pos;
	}
	return $end - $pos;
}

# The bulk strings of an array value, as a list ([] if not such an array).
sub _strings
{
	my ($value) = @_;
	my @out;
	return () unless $value =~ /^\*(\d+)\r\n/;
	my $n = $1;
	my $at = length("*$n\r\n");
	for (1 .. $n)
	{
		return @out unless substr($value, $at) =~ /^\$(\d+)\r\n/;
		my $len = $1;
		$at += length("\$$len\r\n");
		push @out, substr($value, $at, $len);
		$at += $len + 2;
	}
	return @out;
}

sub _serve
{
	my ($listen, $ctl, $upstream, @more) = @_;
	my %listeners = map { fileno($_) => $_ } ($listen, @more);
	my $sel = IO::Select->new(values %listeners, $ctl);
	$ctl->autoflush(1);
	my %conn;    # by fileno of either socket: the shared record
	my @rules;
	my %split;
	my %named;    # connections per client name so far
	my $commands = 0;
	my $ctlbuf = '';
	local $SIG{TERM} = sub { POSIX::_exit(0) };
	local $SIG{PIPE} = 'IGNORE';    # a client gone: the write fails

	my $drop = sub {
		my ($c) = @_;
		for my $s ($c->{client}, $c->{server})
		{
			next unless $s;
			$sel->remove($s);
			delete $conn{ fileno($s) } if defined fileno($s);
			close $s;
		}
		$c->{client} = $c->{server} = undef;
	};

	my $to_client = sub {
		my ($c, $bytes) = @_;
		$c->{out} .= $bytes;
	};

	my $rule_for = sub {
		my ($c, $cmd) = @_;
		for my $r (@rules)
		{
			next unless $r->{count} != 0;
			next
			  unless $r->{client} eq '*'
			  || (defined $c->{name} && $c->{name} eq $r->{client});
			next unless $cmd =~ $r->{pattern};
			$r->{count}-- if $r->{count} > 0;
			return $r;
		}
		return undef;
	};

	while (1)
	{
		my $timeout = 0.2;
		for my $c (values %conn)
		{
			$timeout = 0.001 if length($c->{out} // '') || $c->{stream};
		}
		my @ready = $sel->can_read($timeout);
		for my $s (@ready)
		{
			if ($listeners{ fileno($s) })
			{
				my $client = $s->accept or next;
				my $server = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $upstream,
					Proto => 'tcp');
				unless ($server)
				{
					close $client;
					next;
				}
				setsockopt($client, IPPROTO_TCP, TCP_NODELAY, 1);
				$client->blocking(0);
				my $c = {
					client => $client,
					server => $server,
					from_client => '',
					from_server => '',
					out => '',
					pending => [],
				};
				$conn{ fileno($client) } = $c;
				$conn{ fileno($server) } = $c;
				$sel->add($client, $server);
				next;
			}
			if ($s == $ctl)
			{
				my $got = sysread($ctl, $ctlbuf, 65536, length $ctlbuf);
				POSIX::_exit(0) unless $got;
				while ($ctlbuf =~ s/^(.*)\n//)
				{
					my ($op, @a) = split / /, $1;
					my $answer = 'ok';
					if ($op eq 'rule')
					{
						my ($action, $client, $pattern, $bytes, $count) = @a;
						push @rules, {
							action => $action,
							client => $client,
							pattern => qr/${\ pack('H*', $pattern)}/s,
							bytes => pack('H*', $bytes // ''),
							count => $count,
						};
					}
					elsif ($op eq 'inject')
					{
						my %seen;
						for my $c (grep { !$seen{$_}++ } values %conn)
						{
							$to_client->($c, pack('H*', $a[1] // ''))
							  if defined $c->{name} && $c->{name} eq $a[0];
						}
					}
					elsif ($op eq 'inject_bulks')
					{
						my ($client, $head, $count, $size) = @a;
						my $bytes = pack('H*', $head // '')
						  . ("\$$size\r\n" . ('x' x $size) . "\r\n") x $count;
						my %seen;
						for my $c (grep { !$seen{$_}++ } values %conn)
						{
							$to_client->($c, $bytes)
							  if defined $c->{name} && $c->{name} eq $client;
						}
					}
					elsif ($op eq 'unsent')
					{
						my %seen;
						$answer = 0;
						$answer += length($_->{out} // '')
						  for grep { !$seen{$_}++ } values %conn;
					}
					elsif ($op eq 'trickle')
					{
						$split{ $a[0] } = $a[1];
					}
					elsif ($op eq 'clear' && @a)
					{
						@rules = grep { $_->{client} ne $a[0] } @rules;
						delete $split{ $a[0] };
						my %seen;
						$_->{stream} = 0
						  for grep { !$seen{$_}++ && defined $_->{name} && $_->{name} eq $a[0] }
						  values %conn;
					}
					elsif ($op eq 'clear')
					{
						@rules = ();
						%split = ();
						my %seen;
						$_->{stream} = 0 for grep { !$seen{$_}++ } values %conn;
					}
					elsif ($op eq 'commands')
					{
						$answer = $commands;
					}
					elsif ($op eq 'connections')
					{
						$answer = $named{ $a[0] } // 0;
					}
					elsif ($op eq 'drop')
					{
						my %seen;
						$drop->($_) for grep { !$seen{$_}++ } values %conn;
					}
					print $ctl "$answer\n";
				}
				next;
			}
			my $c = $conn{ fileno($s) } or next;
			my $buf = '';
			my $got = sysread($s, $buf, 65536);
			unless ($got)
			{
				$drop->($c);
				next;
			}
			if ($s == $c->{client})
			{
				$c->{from_client} .= $buf;
				while (my $len = _value_length($c->{from_client}))
				{
					my $raw = substr($c->{from_client}, 0, $len, '');
					my @args = _strings($raw);
					$commands++;
					if (@args >= 3 && uc($args[0]) eq 'CLIENT'
						&& uc($args[1]) eq 'SETNAME')
					{
						$c->{name} = $args[2];
						$named{ $args[2] }++;
					}
					push @{ $c->{pending} }, join(' ', @args);
					syswrite($c->{server}, $raw) if $c->{server};
				}
			}
			else
			{
				$c->{from_server} .= $buf;
				while (my $len = _value_length($c->{from_server}))
				{
					my $raw = substr($c->{from_server}, 0, $len, '');
					my @args = _strings($raw);
					if (@args && $args[0] =~ /^[ps]?message$/)
					{
						$to_client->($c, $raw);
						next;
					}
					my $cmd = shift @{ $c->{pending} } // '';
					next if $c->{muted};
					my $r = $rule_for->($c, $cmd);
					if (!$r)
					{
						$to_client->($c, $raw);
					}
					elsif ($r->{action} eq 'replace')
					{
						$to_client->($c, $r->{bytes});
					}
					elsif ($r->{action} eq 'after')
					{
						$to_client->($c, $raw . $r->{bytes});
					}
					elsif ($r->{action} eq 'close_mid')
					{
						syswrite($c->{client},
							substr($raw, 0, int(length($raw) / 2)))
						  if $c->{client};
						$drop->($c);
						last;
					}
					elsif ($r->{action} eq 'stream')
					{
						$to_client->($c, $r->{bytes});
						$c->{stream} = 1;
					}
					elsif ($r->{action} eq 'mute')
					{
						$c->{muted} = 1;
					}
				}
			}
		}

		# write what waits for each client: all at once, or a byte per
		# turn when split; a streaming client gets more junk each turn
		my %seen;
		for my $c (grep { !$seen{$_}++ } values %conn)
		{
			next unless $c->{client};
			$c->{out} .= 'x' x 65536 if $c->{stream} && length($c->{out}) < 65536;
			next unless length $c->{out};
			my $n = ($c->{name} && $split{ $c->{name} }) ? 1 : length $c->{out};
			my $w = syswrite($c->{client}, $c->{out}, $n);
			if (!defined $w)
			{
				$drop->($c) unless $!{EAGAIN};
				next;
			}
			substr($c->{out}, 0, $w, '');
		}
	}
}

1;
