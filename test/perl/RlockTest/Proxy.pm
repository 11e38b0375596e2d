
=pod

=head1 NAME

RlockTest::Proxy - a TCP relay between rlock and Redis that can hold back what
one client sends, as a network that delays packets would

=head1 SYNOPSIS

  my $proxy = RlockTest::Proxy->start($redis->port);
  # point rlock.port at $proxy->port
  $proxy->hold('rlock_command');   # bytes from that connection wait here
  ...                              # rlock gives up on it and reconnects
  my $fate = $proxy->deliver;      # 'answered' or 'closed'
  $proxy->resume;                  # or: pass on what was held, and carry on
  $proxy->hold_replies('rlock_command');  # what Redis answers waits here
  $proxy->resume_replies;          # and is passed on
  $proxy->mute_replies('rlock_subscriber');  # what Redis sends is lost
  $proxy->held_count('EVALSHA');   # times a text is in the bytes held
  $proxy->stop;

=head1 DESCRIPTION

The relay runs in a child process.  Each client connection gets its own
connection to Redis.  A connection is known by the name its client gives
itself with CLIENT SETNAME.  hold($name) makes the relay keep what that
client sends from then on instead of passing it to Redis; the connection
to Redis stays open even after the client closes its side, as TCP would
keep retransmitting.  deliver() sends what was held, followed by a PING,
and reports whether Redis answered ('answered': the held commands ran)
or had already closed the connection ('closed': they could not run).

hold_replies($name) keeps what Redis sends to that client instead, until
resume_replies(); mute_replies($name) drops it for good while both
connections stay open, as a network that lost one connection's packets
without a word would.  held_count($text) says how many times $text occurs
in the bytes hold() kept, so a test can wait until a command was sent.

=cut

package RlockTest::Proxy;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Socket;
use RlockTest::Relay;
use parent -norequire, 'RlockTest::Relay';

# Hold back from now on what the client named $name sends.  Returns the
# number of such connections.
sub hold
{
	my ($self, $name) = @_;
	return $self->ask("hold $name");
}

# Pass on what was held and relay that connection as before: its client
# gets the replies.  Returns 'resumed', 'closed', or 'none' if nothing
# was held.
sub resume
{
	my ($self, $timeout) = @_;
	return $self->ask('resume', $timeout);
}

# Deliver what was held; 'answered', 'closed', or 'none' if nothing was
# held.
sub deliver
{
	my ($self, $timeout) = @_;
	return $self->ask('deliver', $timeout);
}

# Hold back from now on what Redis sends to the client named $name.
sub hold_replies
{
	my ($self, $name) = @_;
	return $self->ask("rhold $name");
}

# Pass on what Redis sent while replies were held; 'resumed' or 'none'.
sub resume_replies
{
	my ($self) = @_;
	return $self->ask('rresume');
}

# Drop from now on whatever Redis sends to the client named $name.
sub mute_replies
{
	my ($self, $name) = @_;
	return $self->ask("rmute $name");
}

# How many times $text occurs in the bytes held back by hold().
sub held_count
{
	my ($self, $text) = @_;
	return $self->ask("held $text");
}

# The relay's loop, in the child.
sub _serve
{
	my ($listen, $ctl, $upstream) = @_;
	my @conns;			# { c, s, name, holding, held, cdone, sdone, probing }
	my $probe;			# the connection whose delivery is being watched

	$SIG{TERM} = sub { POSIX::_exit(0) };
	$ctl->autoflush(1);

	my $report = sub { print {$ctl} "$_[0]\n" };

	for (;;)
	{
		my $sel = IO::Select->new($listen, $ctl);
		for my $k (@conns)
		{
			$sel->add($k->{c}) unless $k->{cdone};
			$sel->add($k->{s}) unless $k->{sdone};
		}
		for my $fh ($sel->can_read)
		{
			if ($fh == $listen)
			{
				my $c = $listen->accept or next;
				my $s = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $upstream,
					Proto => 'tcp');
				if (!$s)
				{
					close $c;
					next;
				}
				push @conns, { c => $c, s => $s, name => '', held => '' };
				next;
			}
			if ($fh == $ctl)
			{
				my $line = readline($ctl);
				POSIX::_exit(0) unless defined $line;
				chomp $line;
				if ($line =~ /^hold (\S+)$/)
				{
					my $n = 0;
					for my $k (@conns)
					{
						next unless $k->{name} eq $1 && !$k->{cdone};
						$k->{holding} = 1;
						$n++;
					}
					$report->($n);
				}
				elsif ($line =~ /^r(hold|mute) (\S+)$/)
				{
					my ($what, $name) = ($1, $2);
					my $n = 0;
					for my $k (@conns)
					{
						next unless $k->{name} eq $name && !$k->{cdone};
						$k->{"r$what"} = 1;
						$k->{rheld} //= '';
						$n++;
					}
					$report->($n);
				}
				elsif ($line eq 'rresume')
				{
					my $n = 0;
					for my $k (grep { $_->{rhold} } @conns)
					{
						$k->{rhold} = 0;
						syswrite($k->{c}, $k->{rheld})
						  if !$k->{cdone} && length $k->{rheld};
						$k->{rheld} = '';
						$n++;
					}
					$report->($n ? 'resumed' : 'none');
				}
				elsif ($line =~ /^held (.+)$/)
				{
					my ($text, $n) = ($1, 0);
					for my $k (grep { $_->{holding} } @conns)
					{
						$n++ while $k->{held} =~ /\Q$text\E/g;
					}
					$report->($n);
				}
				elsif ($line eq 'resume')
				{
					my ($k) = grep { $_->{holding} } @conns;
					if (!$k)
					{
						$report->('none');
						next;
					}
					$k->{holding} = 0;
					my $out = $k->{held};
					$k->{held} = '';
					$report->(!$k->{sdone} && !$k->{cdone} &&
						  defined syswrite($k->{s}, $out) ? 'resumed' : 'closed');
				}
				elsif ($line eq 'deliver')
				{
					my ($k) = grep { $_->{holding} } @conns;
					if (!$k)
					{
						$report->('none');
						next;
					}
					$k->{holding} = 0;
					if ($k->{sdone})
					{
						$report->('closed');
						next;
					}
					my $out = $k->{held} . "*1\r\n\$4\r\nPING\r\n";
					$k->{held} = '';
					if (!defined syswrite($k->{s}, $out))
					{
						$report->('closed');
						next;
					}
					$probe = $k;
				}
				next;
			}

			my ($k) = grep { $_->{c} == $fh || $_->{s} == $fh } @conns;
			next unless $k;
			my $buf = '';
			my $got = sysread($fh, $buf, 65536);
			if ($fh == $k->{c})
			{
				if (!$got)
				{
					# the client is gone; a held connection stays open
					$k->{cdone} = 1;
					close $k->{c};
					unless ($k->{holding})
					{
						$k->{sdone} = 1;
						close $k->{s};
					}
				}
				else
				{
					$k->{name} = $1
					  if $k->{name} eq '' && $buf =~ /(rlock_\w+)/;
					if ($k->{holding})
					{
						$k->{held} .= $buf;
					}
					else
					{
						syswrite($k->{s}, $buf);
					}
				}
			}
			else
			{
				if (!$got)
				{
					$k->{sdone} = 1;
					close $k->{s};
					if (defined $probe && $probe == $k)
					{
						$report->('closed');
						undef $probe;
					}
					unless ($k->{cdone})
					{
						$k->{cdone} = 1;
						close $k->{c};
					}
				}
				elsif (defined $probe && $probe == $k)
				{
					$report->('answered');
					undef $probe;
				}
				elsif ($k->{rmute})
				{
					# lost on the way
				}
				elsif ($k->{rhold})
				{
					$k->{rheld} .= $buf;
				}
				elsif (!$k->{cdone})
				{
					syswrite($k->{c}, $buf);
				}
			}
			@conns = grep { !($_->{cdone} && $_->{sdone}) || $_->{holding} } @conns;
		}
	}
}

1;
